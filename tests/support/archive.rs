//! A tiny archive of a database folder (`[u16 name len][name][u64 len][bytes]` per file, gzip'd),
//! for the golden logs in `tests/golden/`. Included with `#[path]` by the test binaries that
//! need it (`tests/it`, `tests/cli`); not part of the support library (no flate2 there).
#![allow(dead_code)] // `tests/cli` only unpacks

use std::io::{Read, Write};
use std::path::Path;

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;

/// Packs every file under `dir` as `[u16 name len][name][u64 len][bytes]`, gzip'd.
pub(crate) fn pack(dir: &Path) -> Vec<u8> {
    let mut files = Vec::new();
    collect(dir, dir, &mut files);
    files.sort();
    let mut raw = Vec::new();
    for (name, bytes) in files {
        raw.extend_from_slice(&(name.len() as u16).to_le_bytes());
        raw.extend_from_slice(name.as_bytes());
        raw.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        raw.extend_from_slice(&bytes);
    }
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&raw).unwrap();
    gz.finish().unwrap()
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(root, &path, out);
        } else {
            let name = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.push((name, std::fs::read(&path).unwrap()));
        }
    }
}

/// Unpacks an archive made by [`pack`] into `dir`.
pub(crate) fn unpack(archive: &[u8], dir: &Path) {
    let mut raw = Vec::new();
    GzDecoder::new(archive).read_to_end(&mut raw).unwrap();
    let mut rest = &raw[..];
    while !rest.is_empty() {
        let name_len = u16::from_le_bytes(rest[..2].try_into().unwrap()) as usize;
        let name = std::str::from_utf8(&rest[2..2 + name_len])
            .unwrap()
            .to_owned();
        rest = &rest[2 + name_len..];
        let len = u64::from_le_bytes(rest[..8].try_into().unwrap()) as usize;
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, &rest[8..8 + len]).unwrap();
        rest = &rest[8 + len..];
    }
}
