//! Repository hygiene: every Rust source file opens with a `//!` line saying what it is for.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_source_file_opens_with_a_doc_line() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["crates", "tests", "benches"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(
        files.len() > 20,
        "found only {} files: wrong root?",
        files.len()
    );
    let missing: Vec<String> = files
        .iter()
        .filter(|f| !std::fs::read_to_string(f).unwrap().starts_with("//!"))
        .map(|f| f.strip_prefix(root).unwrap().display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "files without a leading //! line: {missing:?}"
    );
}

/// A crate's modules (`a`, `a::b`; the crate root is ``) by file.
fn modules(src: &Path) -> Vec<(String, PathBuf)> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files
        .into_iter()
        .map(|file| {
            let rel = file.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            (parts.join("::"), file)
        })
        .collect()
}

/// The paths `text` names through `crate::` (with `use crate::{a, b::c}` groups expanded) and
/// `super::` (relative to `module`), comments left out.
fn referenced_paths(text: &str, module: &str) -> Vec<String> {
    // A file's unit tests (its `#[cfg(test)]` module, last in the file) may use the whole crate.
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or(text);
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let parent: Vec<&str> = module.split("::").filter(|s| !s.is_empty()).collect();
    let parent = parent[..parent.len().saturating_sub(1)].join("::");
    let mut out = Vec::new();
    for (prefix, base) in [("crate::", String::new()), ("super::", parent)] {
        let mut rest = code.as_str();
        while let Some(at) = rest.find(prefix) {
            let before = rest[..at].chars().last();
            rest = &rest[at + prefix.len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let join = |path: &str| match base.as_str() {
                "" => path.to_owned(),
                b => format!("{b}::{path}"),
            };
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for item in group[..end].split(',') {
                    out.push(join(item.trim()));
                }
            } else {
                let end = rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(rest.len());
                out.push(join(&rest[..end]));
            }
        }
    }
    out
}

/// The longest known module that `path` starts with (never the root).
fn module_of<'a>(path: &str, known: &'a [(String, PathBuf)]) -> Option<&'a str> {
    known
        .iter()
        .map(|(m, _)| m.as_str())
        .filter(|m| !m.is_empty())
        .filter(|m| path == *m || path.starts_with(&format!("{m}::")))
        .max_by_key(|m| m.len())
}

/// What each module re-exports (`pub use child::Item;`, `pub(crate) use child::{A, B};`): the
/// re-exported path (`module::Item`) mapped to where the item is defined (`module::child::Item`).
fn re_exports(known: &[(String, PathBuf)]) -> std::collections::BTreeMap<String, String> {
    let join = |a: &str, b: &str| match a {
        "" => b.to_owned(),
        a => format!("{a}::{b}"),
    };
    let mut out = std::collections::BTreeMap::new();
    for (module, file) in known {
        let text = std::fs::read_to_string(file).unwrap();
        for statement in text.split(';') {
            let at = statement.find("pub use ");
            let Some(at) = at.or_else(|| statement.find("pub(crate) use ")) else {
                continue;
            };
            let body = statement[at..].split_once("use ").unwrap().1;
            let body: Vec<&str> = body.split_whitespace().collect();
            let body = body.join(" ");
            let (from, items) = match body.split_once("::{") {
                Some((from, items)) => (from, items.trim_end_matches('}')),
                None => match body.rsplit_once("::") {
                    Some(split) => split,
                    None => continue,
                },
            };
            let from = match from.strip_prefix("crate::") {
                Some(path) => path.to_owned(),
                None if from.starts_with("super") => continue,
                None => join(module, from),
            };
            for item in items.split(',').map(str::trim) {
                let name = item.split(" as ").last().unwrap_or(item);
                let defined = item.split(" as ").next().unwrap_or(item);
                if !name.is_empty() && name != "self" {
                    out.insert(join(module, name), join(&from, defined));
                }
            }
        }
    }
    out
}

/// `path` with the re-exports it goes through followed to where the item is defined.
fn resolved(path: &str, exports: &std::collections::BTreeMap<String, String>) -> String {
    let mut path = path.to_owned();
    for _ in 0..8 {
        let hit = exports
            .iter()
            .filter(|(from, _)| path == **from || path.starts_with(&format!("{from}::")))
            .max_by_key(|(from, _)| from.len());
        match hit {
            Some((from, to)) if !to.starts_with(from.as_str()) => {
                path = format!("{to}{}", &path[from.len()..]);
            }
            _ => break,
        }
    }
    path
}

/// The module cycles of one crate: each a list of modules that import each other in a circle.
/// An edge from a module to one of its ancestors is not counted (a parent declares its children
/// and re-exports them; the crate root is only a table of contents).
fn module_cycles(src: &Path) -> Vec<Vec<String>> {
    let known = modules(src);
    let exports = re_exports(&known);
    let mut edges: std::collections::BTreeMap<&str, std::collections::BTreeSet<&str>> =
        Default::default();
    for (module, file) in &known {
        let text = std::fs::read_to_string(file).unwrap();
        for path in referenced_paths(&text, module) {
            if let Some(target) = module_of(&resolved(&path, &exports), &known) {
                let ancestor = module == target || module.starts_with(&format!("{target}::"));
                if !ancestor {
                    edges.entry(module).or_default().insert(target);
                }
            }
        }
    }
    // A module is in a cycle with every module it reaches that reaches it back.
    let reach = |from: &str| {
        let mut seen = std::collections::BTreeSet::new();
        let mut todo = vec![from];
        while let Some(m) = todo.pop() {
            for next in edges.get(m).into_iter().flatten() {
                if seen.insert(*next) {
                    todo.push(next);
                }
            }
        }
        seen
    };
    let mut cycles: Vec<Vec<String>> = Vec::new();
    for (module, _) in &known {
        let circle: Vec<String> = reach(module)
            .into_iter()
            .filter(|other| reach(other).contains(module.as_str()))
            .map(str::to_owned)
            .collect();
        if !circle.is_empty() && !cycles.contains(&circle) {
            cycles.push(circle);
        }
    }
    cycles
}

#[test]
fn the_cycle_finder_sees_a_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "//! t\nmod a;\nmod b;\nmod c;\n").unwrap();
    std::fs::write(src.join("a.rs"), "//! a\nuse crate::b::B;\n").unwrap();
    std::fs::write(src.join("b.rs"), "//! b\nuse crate::{c::C, a};\n").unwrap();
    std::fs::write(src.join("c.rs"), "//! c\n// crate::a in a comment\n").unwrap();
    assert_eq!(
        module_cycles(src),
        vec![vec!["a".to_owned(), "b".to_owned()]]
    );
    std::fs::write(src.join("c.rs"), "//! c\nfn f() { super::a::f() }\n").unwrap();
    std::fs::write(src.join("a.rs"), "//! a\n").unwrap();
    assert!(module_cycles(src).is_empty());
    // A path through the crate root's re-export is an import of the module that defines it.
    let lib = "//! t\nmod a;\nmod b;\nmod c;\npub use a::{A, Other};\n";
    std::fs::write(src.join("lib.rs"), lib).unwrap();
    std::fs::write(src.join("a.rs"), "//! a\nuse crate::b::B;\npub struct A;\n").unwrap();
    std::fs::write(src.join("b.rs"), "//! b\nuse crate::A;\npub struct B;\n").unwrap();
    assert_eq!(
        module_cycles(src),
        vec![vec!["a".to_owned(), "b".to_owned()]]
    );
}

#[test]
fn no_module_cycle_inside_a_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("src"))
        .filter(|src| src.is_dir())
        .collect();
    crates.push(root.join("tests/support"));
    assert!(crates.len() >= 7, "found only {crates:?}");
    let found: Vec<String> = crates
        .iter()
        .flat_map(|src| {
            module_cycles(src).into_iter().map(move |cycle| {
                format!(
                    "{}: {}",
                    src.parent().unwrap().display(),
                    cycle.join(" <-> ")
                )
            })
        })
        .collect();
    assert!(found.is_empty(), "module cycles: {found:#?}");
}
