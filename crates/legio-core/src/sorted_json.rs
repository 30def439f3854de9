//! A serde serializer writing compact JSON straight into a byte buffer with every object's keys in
//! sorted order: the bytes `serde_json::to_writer(serde_json::to_value(x))` gives (serde_json's
//! `Value` keeps objects in a `BTreeMap`), without building the `Value` tree.
//!
//! Objects are written as their fields come; when an object ends, its entries are reordered in
//! place only if they were not already sorted (a later entry with the same key replaces the earlier
//! one, as in a map). Keys and entry positions live on stacks in [`SortedJson`], reused from one
//! value to the next, so writing a value allocates nothing once they have grown. Numbers are written
//! by serde_json itself (an `f32` widened to `f64` first, as `Value` stores it); strings by
//! [`push_str`], which escapes exactly as serde_json does, eight bytes at a time.

use serde::ser::{self, Impossible, Serialize};
use serde_json::Error;

type Result<T> = std::result::Result<T, Error>;

/// Reused stacks for writing sorted JSON (see the module documentation).
#[derive(Debug, Default)]
pub struct SortedJson {
    /// Entries of the objects being written, innermost last.
    entries: Vec<Entry>,
    /// The keys of those entries, unescaped, back to back.
    keys: Vec<u8>,
    /// Where an object's entries are copied while they are put in order.
    copy: Vec<u8>,
}

/// One `"key":value` of an object being written: its key, its bytes in the output.
#[derive(Clone, Copy, Debug)]
struct Entry {
    key: Key,
    span: (usize, usize),
}

/// An entry's key: a field name, or a map key on the key stack (`SortedJson::keys`).
#[derive(Clone, Copy, Debug)]
enum Key {
    Static(&'static str),
    Stacked(usize, usize),
}

impl Key {
    fn bytes<'k>(&self, keys: &'k [u8]) -> &'k [u8] {
        match *self {
            Key::Static(name) => name.as_bytes(),
            Key::Stacked(from, to) => &keys[from..to],
        }
    }
}

/// The order of keys (`BTreeMap<String, _>`'s), deciding on the first byte without a call.
fn key_order(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    match a.first().cmp(&b.first()) {
        std::cmp::Ordering::Equal => a.cmp(b),
        order => order,
    }
}

/// Appends `text` as a JSON string, escaped exactly as serde_json escapes it (`\"`, `\\`, `\b`,
/// `\f`, `\n`, `\r`, `\t`, other controls as `\u00xx`; nothing else), looking at eight bytes at
/// a time for the rare byte that needs it.
pub(crate) fn push_str(out: &mut Vec<u8>, text: &str) {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // Whether a byte of `word` is a control, `"` or `\` (exact: word tricks for "has a byte
    // below n" and "has a zero byte").
    let needs_escape = |word: u64| {
        let zero_byte = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
        let control = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
        control | zero_byte(word ^ (ONES * 0x22)) | zero_byte(word ^ (ONES * 0x5c)) != 0
    };
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        if let Some(word) = bytes.get(i..i + 8) {
            let word = u64::from_le_bytes(word.try_into().unwrap_or([0; 8]));
            if !needs_escape(word) {
                i += 8;
                continue;
            }
        }
        let byte = bytes[i];
        let escape = match byte {
            b'"' => b'"',
            b'\\' => b'\\',
            0x08 => b'b',
            0x0c => b'f',
            b'\n' => b'n',
            b'\r' => b'r',
            b'\t' => b't',
            0..=0x1f => b'u',
            _ => 0,
        };
        if escape != 0 {
            out.extend_from_slice(&bytes[copied..i]);
            out.extend_from_slice(&[b'\\', escape]);
            if escape == b'u' {
                let hex = [
                    b'0',
                    b'0',
                    HEX[usize::from(byte >> 4)],
                    HEX[usize::from(byte & 0xf)],
                ];
                out.extend_from_slice(&hex);
            }
            copied = i + 1;
        }
        i += 1;
    }
    out.extend_from_slice(&bytes[copied..]);
    out.push(b'"');
}

impl SortedJson {
    /// Appends `value` to `out` as compact JSON with sorted object keys. On an error, `out` may
    /// hold part of the value.
    pub fn write<T: Serialize + ?Sized>(&mut self, out: &mut Vec<u8>, value: &T) -> Result<()> {
        self.reset();
        value.serialize(&mut Writer {
            out,
            stacks: self,
            flatten: None,
        })
    }

    /// Appends one object to `out`: the entries `head` writes (through [`Object::entry`]), then
    /// the fields of `fields` (a struct or a map) as if they were the object's own, all sorted
    /// together. `fields` that is neither writes none.
    pub fn write_object<T: Serialize + ?Sized>(
        &mut self,
        out: &mut Vec<u8>,
        head: impl FnOnce(&mut Object<'_, '_>) -> Result<()>,
        fields: &T,
    ) -> Result<()> {
        self.reset();
        let mut writer = Writer {
            out,
            stacks: self,
            flatten: None,
        };
        let mut object = Object::begin(&mut writer);
        head(&mut object)?;
        object.writer.flatten = Some(object.start);
        fields.serialize(&mut *object.writer)?;
        // A struct or map took the flag; anything else wrote no fields.
        object.writer.flatten = None;
        object.finish().map(|_| ())
    }
}

impl SortedJson {
    /// Forgets what a failed write left on the stacks.
    fn reset(&mut self) {
        self.entries.clear();
        self.keys.clear();
    }
}

/// Where an object's entries begin: its first byte after `{`, its first entry and key on the
/// stacks.
#[derive(Clone, Copy, Debug)]
struct Start {
    body: usize,
    entry: usize,
    key: usize,
}

/// The serializer: the output and the stacks; `flatten` set while the fields of a struct or map
/// go into an object already open.
#[derive(Debug)]
struct Writer<'a> {
    out: &'a mut Vec<u8>,
    stacks: &'a mut SortedJson,
    flatten: Option<Start>,
}

impl Writer<'_> {
    /// A scalar or a string, written by serde_json itself.
    fn plain<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.not_fields()?;
        serde_json::to_writer(&mut *self.out, value)
    }

    /// Refuses a value that is not a struct or map where fields were expected (`Value` would
    /// have dropped it; the caller writes it that way instead).
    fn not_fields(&mut self) -> Result<()> {
        match self.flatten.take() {
            Some(_) => Err(ser::Error::custom("fields expected: not a struct or map")),
            None => Ok(()),
        }
    }
}

/// An object being written.
#[derive(Debug)]
pub struct Object<'w, 'a> {
    writer: &'w mut Writer<'a>,
    start: Start,
    /// The fields of a struct or map written into an enclosing object (no braces of its own).
    flattened: bool,
}

impl<'w, 'a> Object<'w, 'a> {
    fn begin(writer: &'w mut Writer<'a>) -> Self {
        if let Some(start) = writer.flatten.take() {
            return Self {
                writer,
                start,
                flattened: true,
            };
        }
        writer.out.push(b'{');
        let start = Start {
            body: writer.out.len(),
            entry: writer.stacks.entries.len(),
            key: writer.stacks.keys.len(),
        };
        Self {
            writer,
            start,
            flattened: false,
        }
    }

    /// Writes the entry `key`: `value`.
    pub fn entry<T: Serialize + ?Sized>(&mut self, key: &'static str, value: &T) -> Result<()> {
        self.write_entry(Key::Static(key), value)
    }

    /// Writes an entry: a comma unless it is the first, the key, `:`, the value.
    fn write_entry<T: Serialize + ?Sized>(&mut self, key: Key, value: &T) -> Result<()> {
        let Writer { out, stacks, .. } = &mut *self.writer;
        if stacks.entries.len() > self.start.entry {
            out.push(b',');
        }
        let from = out.len();
        let text = match key {
            Key::Static(name) => name,
            // Map keys were written from `&str`s and numbers: UTF-8.
            Key::Stacked(..) => {
                std::str::from_utf8(key.bytes(&stacks.keys)).map_err(ser::Error::custom)?
            }
        };
        push_str(out, text);
        out.push(b':');
        value.serialize(&mut *self.writer)?;
        let span = (from, self.writer.out.len());
        self.writer.stacks.entries.push(Entry { key, span });
        Ok(())
    }

    /// Closes the object: its entries in key order, then `}`. Returns the writer.
    fn finish(self) -> Result<&'w mut Writer<'a>> {
        if self.flattened {
            return Ok(self.writer);
        }
        let Writer { out, stacks, .. } = &mut *self.writer;
        let Start { body, entry, key } = self.start;
        let keys = &stacks.keys;
        let entries = &mut stacks.entries[entry..];
        let name = |e: &Entry| e.key.bytes(keys);
        let sorted = entries
            .windows(2)
            .all(|w| key_order(name(&w[0]), name(&w[1])).is_lt());
        if !sorted {
            entries.sort_by(|a, b| key_order(name(a), name(b)));
            stacks.copy.clear();
            stacks.copy.extend_from_slice(&out[body..]);
            out.truncate(body);
            let mut first = true;
            for (i, e) in entries.iter().enumerate() {
                // Equal keys are adjacent in writing order: the last one stands (as in a map).
                if entries.get(i + 1).is_some_and(|next| name(next) == name(e)) {
                    continue;
                }
                if !first {
                    out.push(b',');
                }
                first = false;
                out.extend_from_slice(&stacks.copy[e.span.0 - body..e.span.1 - body]);
            }
        }
        out.push(b'}');
        stacks.entries.truncate(entry);
        stacks.keys.truncate(key);
        Ok(self.writer)
    }
}

/// An array being written.
#[derive(Debug)]
struct Array<'w, 'a> {
    writer: &'w mut Writer<'a>,
    empty: bool,
}

impl<'w, 'a> Array<'w, 'a> {
    fn begin(writer: &'w mut Writer<'a>) -> Result<Self> {
        writer.not_fields()?;
        writer.out.push(b'[');
        Ok(Self {
            writer,
            empty: true,
        })
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        if !self.empty {
            self.writer.out.push(b',');
        }
        self.empty = false;
        value.serialize(&mut *self.writer)
    }

    fn finish(self) {
        self.writer.out.push(b']');
    }
}

/// A tuple or struct variant: `{"Variant":[...]}` or `{"Variant":{...}}`.
#[derive(Debug)]
pub struct Variant<C>(C);

/// Opens `{"variant":` (a one-entry object needs no sorting).
fn open_variant(writer: &mut Writer<'_>, variant: &'static str) -> Result<()> {
    writer.not_fields()?;
    writer.out.push(b'{');
    push_str(writer.out, variant);
    writer.out.push(b':');
    Ok(())
}

macro_rules! plain {
    ($($method:ident: $ty:ty),* $(,)?) => {
        $(fn $method(self, v: $ty) -> Result<()> {
            self.plain(&v)
        })*
    };
}

impl<'w, 'a> ser::Serializer for &'w mut Writer<'a> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Array<'w, 'a>;
    type SerializeTuple = Array<'w, 'a>;
    type SerializeTupleStruct = Array<'w, 'a>;
    type SerializeTupleVariant = Variant<Array<'w, 'a>>;
    type SerializeMap = MapWriter<'w, 'a>;
    type SerializeStruct = Object<'w, 'a>;
    type SerializeStructVariant = Variant<Object<'w, 'a>>;

    plain! {
        serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32,
        serialize_i64: i64, serialize_u8: u8, serialize_u16: u16, serialize_u32: u32,
        serialize_u64: u64, serialize_f64: f64,
    }

    fn serialize_char(self, v: char) -> Result<()> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }

    fn serialize_str(self, v: &str) -> Result<()> {
        self.not_fields()?;
        push_str(self.out, v);
        Ok(())
    }

    fn serialize_i128(self, v: i128) -> Result<()> {
        // As `Value` holds it (an error past 64 bits).
        let value = serde_json::to_value(v)?;
        self.plain(&value)
    }

    fn serialize_u128(self, v: u128) -> Result<()> {
        let value = serde_json::to_value(v)?;
        self.plain(&value)
    }

    fn serialize_f32(self, v: f32) -> Result<()> {
        // `Value` keeps every float as an f64.
        self.plain(&f64::from(v))
    }

    fn serialize_bytes(self, v: &[u8]) -> Result<()> {
        let mut array = Array::begin(self)?;
        for byte in v {
            array.element(byte)?;
        }
        array.finish();
        Ok(())
    }

    fn serialize_none(self) -> Result<()> {
        self.plain(&())
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result<()> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<()> {
        self.plain(&())
    }

    fn serialize_unit_struct(self, _name: &'static str) -> Result<()> {
        self.plain(&())
    }

    fn serialize_unit_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
    ) -> Result<()> {
        self.serialize_str(variant)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<()> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<()> {
        open_variant(self, variant)?;
        value.serialize(&mut *self)?;
        self.out.push(b'}');
        Ok(())
    }

    fn serialize_seq(self, _len: Option<usize>) -> Result<Array<'w, 'a>> {
        Array::begin(self)
    }

    fn serialize_tuple(self, _len: usize) -> Result<Array<'w, 'a>> {
        Array::begin(self)
    }

    fn serialize_tuple_struct(self, _name: &'static str, _len: usize) -> Result<Array<'w, 'a>> {
        Array::begin(self)
    }

    fn serialize_tuple_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeTupleVariant> {
        open_variant(self, variant)?;
        Ok(Variant(Array::begin(self)?))
    }

    fn serialize_map(self, _len: Option<usize>) -> Result<MapWriter<'w, 'a>> {
        Ok(MapWriter {
            object: Object::begin(self),
            key: None,
        })
    }

    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Object<'w, 'a>> {
        Ok(Object::begin(self))
    }

    fn serialize_struct_variant(
        self,
        _name: &'static str,
        _index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Self::SerializeStructVariant> {
        open_variant(self, variant)?;
        Ok(Variant(Object::begin(self)))
    }
}

impl ser::SerializeSeq for Array<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.element(value)
    }
    fn end(self) -> Result<()> {
        self.finish();
        Ok(())
    }
}

impl ser::SerializeTuple for Array<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.element(value)
    }
    fn end(self) -> Result<()> {
        self.finish();
        Ok(())
    }
}

impl ser::SerializeTupleStruct for Array<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.element(value)
    }
    fn end(self) -> Result<()> {
        self.finish();
        Ok(())
    }
}

impl ser::SerializeTupleVariant for Variant<Array<'_, '_>> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        self.0.element(value)
    }
    fn end(self) -> Result<()> {
        self.0.writer.out.extend_from_slice(b"]}");
        Ok(())
    }
}

impl ser::SerializeStruct for Object<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<()> {
        self.entry(key, value)
    }
    fn end(self) -> Result<()> {
        self.finish().map(|_| ())
    }
}

impl ser::SerializeStructVariant for Variant<Object<'_, '_>> {
    type Ok = ();
    type Error = Error;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<()> {
        self.0.entry(key, value)
    }
    fn end(self) -> Result<()> {
        self.0.finish()?.out.push(b'}');
        Ok(())
    }
}

/// A map being written: an object whose keys come one at a time.
#[derive(Debug)]
pub struct MapWriter<'w, 'a> {
    object: Object<'w, 'a>,
    /// The pending key, on the key stack.
    key: Option<Key>,
}

impl ser::SerializeMap for MapWriter<'_, '_> {
    type Ok = ();
    type Error = Error;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<()> {
        let keys = &mut self.object.writer.stacks.keys;
        let from = keys.len();
        key.serialize(KeyWriter { keys: &mut *keys })?;
        self.key = Some(Key::Stacked(from, keys.len()));
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<()> {
        let key = self
            .key
            .take()
            .ok_or_else(|| <Error as ser::Error>::custom("a map value without a key"))?;
        self.object.write_entry(key, value)
    }
    fn end(self) -> Result<()> {
        self.object.finish().map(|_| ())
    }
}

/// Writes a map key, unescaped, onto the key stack: strings as they are, integers, booleans and
/// chars as their text (what `Value` makes of them); anything else is refused, as `Value` does.
struct KeyWriter<'k> {
    keys: &'k mut Vec<u8>,
}

impl KeyWriter<'_> {
    fn text(self, text: &str) -> Result<()> {
        self.keys.extend_from_slice(text.as_bytes());
        Ok(())
    }
}

fn key_must_be_a_string() -> Error {
    ser::Error::custom("key must be a string")
}

macro_rules! key_as_text {
    ($($method:ident: $ty:ty),* $(,)?) => {
        $(fn $method(self, v: $ty) -> Result<()> {
            self.text(&v.to_string())
        })*
    };
}

impl ser::Serializer for KeyWriter<'_> {
    type Ok = ();
    type Error = Error;
    type SerializeSeq = Impossible<(), Error>;
    type SerializeTuple = Impossible<(), Error>;
    type SerializeTupleStruct = Impossible<(), Error>;
    type SerializeTupleVariant = Impossible<(), Error>;
    type SerializeMap = Impossible<(), Error>;
    type SerializeStruct = Impossible<(), Error>;
    type SerializeStructVariant = Impossible<(), Error>;

    key_as_text! {
        serialize_bool: bool, serialize_i8: i8, serialize_i16: i16, serialize_i32: i32,
        serialize_i64: i64, serialize_u8: u8, serialize_u16: u16, serialize_u32: u32,
        serialize_u64: u64, serialize_i128: i128, serialize_u128: u128, serialize_char: char,
    }

    fn serialize_str(self, v: &str) -> Result<()> {
        self.text(v)
    }
    fn serialize_f32(self, _v: f32) -> Result<()> {
        Err(key_must_be_a_string())
    }
    fn serialize_f64(self, _v: f64) -> Result<()> {
        Err(key_must_be_a_string())
    }
    fn serialize_bytes(self, _v: &[u8]) -> Result<()> {
        Err(key_must_be_a_string())
    }
    fn serialize_none(self) -> Result<()> {
        Err(key_must_be_a_string())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _value: &T) -> Result<()> {
        Err(key_must_be_a_string())
    }
    fn serialize_unit(self) -> Result<()> {
        Err(key_must_be_a_string())
    }
    fn serialize_unit_struct(self, _name: &'static str) -> Result<()> {
        Err(key_must_be_a_string())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<()> {
        self.text(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _name: &'static str,
        value: &T,
    ) -> Result<()> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<()> {
        Err(key_must_be_a_string())
    }
    fn serialize_seq(self, _len: Option<usize>) -> Result<Self::SerializeSeq> {
        Err(key_must_be_a_string())
    }
    fn serialize_tuple(self, _len: usize) -> Result<Self::SerializeTuple> {
        Err(key_must_be_a_string())
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct> {
        Err(key_must_be_a_string())
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant> {
        Err(key_must_be_a_string())
    }
    fn serialize_map(self, _len: Option<usize>) -> Result<Self::SerializeMap> {
        Err(key_must_be_a_string())
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct> {
        Err(key_must_be_a_string())
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant> {
        Err(key_must_be_a_string())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use serde::Serialize;

    use super::SortedJson;

    /// The reference: serde_json's `Value` (sorted maps), then written.
    fn by_value<T: Serialize>(value: &T) -> String {
        serde_json::to_string(&serde_json::to_value(value).unwrap()).unwrap()
    }

    fn sorted<T: Serialize>(json: &mut SortedJson, value: &T) -> String {
        let mut out = Vec::new();
        json.write(&mut out, value).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[derive(Serialize)]
    enum Shape {
        Unit,
        Newtype(u8),
        Tuple(u8, String),
        Struct { zeta: u8, alpha: Vec<u8> },
    }

    #[derive(Serialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Tagged {
        Call {
            name: String,
            args: BTreeMap<String, i32>,
        },
    }

    #[derive(Serialize)]
    struct Inner {
        y: Option<f32>,
        x: f64,
        text: String,
    }

    #[derive(Serialize)]
    struct Outer {
        zed: Inner,
        shapes: Vec<Shape>,
        #[serde(flatten)]
        extra: HashMap<String, serde_json::Value>,
        tagged: Tagged,
        bytes: serde_bytes_like::Bytes,
        big: u128,
        neg: i64,
        nothing: Option<u8>,
        unit: (),
        pair: (char, bool),
    }

    mod serde_bytes_like {
        /// Serialized with `serialize_bytes`.
        pub struct Bytes(pub Vec<u8>);
        impl serde::Serialize for Bytes {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(&self.0)
            }
        }
    }

    fn outer(n: u32) -> Outer {
        let mut extra = HashMap::new();
        for k in ["b", "a", "zed", "\u{e9}t\u{e9}", "a\"q\\\u{1}", "neg"] {
            let value = serde_json::json!({"k": k, "n": n, "arr": [{"z": 1, "y": null}], "f": 0.1});
            extra.insert(format!("{k}{}", n % 3), value);
        }
        // The same key as a field: a map keeps the later one.
        extra.insert("neg".into(), serde_json::json!("from the map"));
        Outer {
            zed: Inner {
                y: Some(0.1 * n as f32),
                x: f64::from(n) / 7.0,
                text: format!("line\n\ttab \u{1b}[2J \u{2028} \u{7f} \"quoted\" {n} ✓"),
            },
            shapes: vec![
                Shape::Unit,
                Shape::Newtype(n as u8),
                Shape::Tuple(1, "t".into()),
                Shape::Struct {
                    zeta: 2,
                    alpha: vec![3, 4],
                },
            ],
            extra,
            tagged: Tagged::Call {
                name: "tool".into(),
                args: [("b".to_owned(), 2), ("a".to_owned(), -1)].into(),
            },
            bytes: serde_bytes_like::Bytes(vec![0, 255, n as u8]),
            big: u128::from(n) << 40,
            neg: -i64::from(n),
            nothing: None,
            unit: (),
            pair: ('\u{0}', n.is_multiple_of(2)),
        }
    }

    #[test]
    fn every_shape_is_written_as_the_sorted_value_writes_it() {
        let mut json = SortedJson::default();
        for n in 0..50 {
            let value = outer(n);
            assert_eq!(sorted(&mut json, &value), by_value(&value), "sample {n}");
        }
        let floats = [f64::NAN, f64::INFINITY, -0.0, 1e300, 5e-324, 123.456];
        assert_eq!(sorted(&mut json, &floats), by_value(&floats));
        let f32s = [0.1_f32, f32::NAN, 3.0e38, 1.5];
        assert_eq!(sorted(&mut json, &f32s), by_value(&f32s));
        let int_keys: HashMap<i32, &str> = [(10, "ten"), (-2, "minus two"), (3, "three")].into();
        assert_eq!(sorted(&mut json, &int_keys), by_value(&int_keys));
    }

    #[test]
    fn strings_are_escaped_exactly_as_serde_json_escapes_them() {
        let alphabet: Vec<char> = (0..0x80)
            .filter_map(char::from_u32)
            .chain(['\u{80}', '\u{ff}', 'é', '✓', '\u{2028}', '𝄞', '\u{10ffff}'])
            .collect();
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for len in 0..120 {
            for round in 0..30 {
                // Mostly plain text, with a special character here and there (or everywhere).
                let text: String = (0..len)
                    .map(|_| match next() % (2 + round) {
                        0 => alphabet[(next() % alphabet.len() as u64) as usize],
                        _ => char::from(b'a' + (next() % 26) as u8),
                    })
                    .collect();
                let mut out = Vec::new();
                super::push_str(&mut out, &text);
                assert_eq!(out, serde_json::to_vec(&text).unwrap(), "{text:?}");
            }
        }
    }

    #[test]
    fn what_value_refuses_is_refused() {
        let mut json = SortedJson::default();
        assert!(serde_json::to_value(u128::MAX).is_err());
        assert!(json.write(&mut Vec::new(), &u128::MAX).is_err());
        let list_keys: BTreeMap<Vec<u8>, u8> = [(vec![1], 1)].into();
        assert!(serde_json::to_value(&list_keys).is_err());
        assert!(json.write(&mut Vec::new(), &list_keys).is_err());
        // The stacks are left usable after an error.
        assert_eq!(sorted(&mut json, &outer(1)), by_value(&outer(1)));
    }

    #[test]
    fn fields_of_an_object_are_sorted_with_the_head_entries() {
        let mut json = SortedJson::default();
        let mut out = Vec::new();
        let fields = outer(7);
        json.write_object(
            &mut out,
            |object| {
                object.entry("seq", &7_u64)?;
                object.entry("kind", "outer")
            },
            &fields,
        )
        .unwrap();
        let mut expected = serde_json::Map::new();
        expected.insert("seq".into(), 7.into());
        expected.insert("kind".into(), "outer".into());
        let serde_json::Value::Object(rest) = serde_json::to_value(&fields).unwrap() else {
            panic!("an object")
        };
        expected.extend(rest);
        let expected = serde_json::to_string(&expected).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), expected);
        // Not an object: no fields, and an error (the caller writes it the `Value` way).
        assert!(json
            .write_object(&mut Vec::new(), |_| Ok(()), &"a string")
            .is_err());
    }
}
