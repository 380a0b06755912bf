//! The key/value table of a GGUF file, in file order, with typed getters.

use std::collections::HashMap;

use super::value::{Array, Value};
use crate::FormatError;

/// Metadata key/value pairs in the order the file stores them, with a hash index by key.
///
/// Typed getters return [`FormatError::MissingKey`] when the key is absent and
/// [`FormatError::WrongType`] when the value cannot be read as the requested type; the
/// `opt_` variants return `Ok(None)` for an absent key and still fail on a wrong type, so a
/// malformed optional key is never silently ignored.
#[derive(Clone, Debug, Default)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    /// An empty table.
    pub fn new() -> Metadata {
        Metadata::default()
    }

    pub(crate) fn with_capacity(n: usize) -> Metadata {
        Metadata {
            entries: Vec::with_capacity(n),
            index: HashMap::with_capacity(n),
        }
    }

    /// Appends a pair; a key that is already present is [`FormatError::DuplicateKey`].
    pub fn insert(
        &mut self,
        key: impl Into<String>,
        value: impl Into<Value>,
    ) -> Result<(), FormatError> {
        let key = key.into();
        if self.index.contains_key(&key) {
            return Err(FormatError::DuplicateKey { key });
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value.into()));
        Ok(())
    }

    /// Replaces the value of a present key (keeping its position) or appends a new pair.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        let key = key.into();
        match self.index.get(&key) {
            Some(&i) => self.entries[i].1 = value.into(),
            None => {
                self.index.insert(key.clone(), self.entries.len());
                self.entries.push((key, value.into()));
            }
        }
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    /// Pairs in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn value(&self, key: &str) -> Result<&Value, FormatError> {
        self.get(key).ok_or_else(|| FormatError::MissingKey {
            key: key.to_owned(),
        })
    }

    fn int<T: TryFrom<i128>>(&self, key: &str, expected: &'static str) -> Result<T, FormatError> {
        let v = self.value(key)?;
        let n = v.as_int().ok_or_else(|| wrong_type(key, expected, v))?;
        T::try_from(n).map_err(|_| FormatError::IntOutOfRange {
            key: key.to_owned(),
            value: n,
            expected,
        })
    }

    /// Any integer value that fits in `u32`.
    pub fn u32(&self, key: &str) -> Result<u32, FormatError> {
        self.int(key, "u32")
    }

    /// Any integer value that fits in `u64`.
    pub fn u64(&self, key: &str) -> Result<u64, FormatError> {
        self.int(key, "u64")
    }

    /// Any integer value that fits in `i64`.
    pub fn i64(&self, key: &str) -> Result<i64, FormatError> {
        self.int(key, "i64")
    }

    /// An `f32`, or an `f64` rounded to `f32`.
    pub fn f32(&self, key: &str) -> Result<f32, FormatError> {
        match self.value(key)? {
            Value::F32(v) => Ok(*v),
            Value::F64(v) => Ok(*v as f32),
            v => Err(wrong_type(key, "f32", v)),
        }
    }

    pub fn bool(&self, key: &str) -> Result<bool, FormatError> {
        match self.value(key)? {
            Value::Bool(v) => Ok(*v),
            v => Err(wrong_type(key, "bool", v)),
        }
    }

    pub fn str(&self, key: &str) -> Result<&str, FormatError> {
        match self.value(key)? {
            Value::String(v) => Ok(v),
            v => Err(wrong_type(key, "string", v)),
        }
    }

    /// An array of any element type.
    pub fn array(&self, key: &str) -> Result<&Array, FormatError> {
        match self.value(key)? {
            Value::Array(v) => Ok(v),
            v => Err(wrong_type(key, "array", v)),
        }
    }

    pub fn str_array(&self, key: &str) -> Result<&[String], FormatError> {
        match self.value(key)? {
            Value::Array(Array::String(v)) => Ok(v),
            v => Err(wrong_type(key, "array[string]", v)),
        }
    }

    pub fn f32_array(&self, key: &str) -> Result<&[f32], FormatError> {
        match self.value(key)? {
            Value::Array(Array::F32(v)) => Ok(v),
            v => Err(wrong_type(key, "array[f32]", v)),
        }
    }

    pub fn i32_array(&self, key: &str) -> Result<&[i32], FormatError> {
        match self.value(key)? {
            Value::Array(Array::I32(v)) => Ok(v),
            v => Err(wrong_type(key, "array[i32]", v)),
        }
    }

    /// An array of any integer type whose elements all fit in `u32`, or an array of bools
    /// (`false` → 0, `true` → 1). Per-layer patterns (sliding window, head counts) are stored
    /// either way depending on the converter.
    pub fn u32_array_any(&self, key: &str) -> Result<Vec<u32>, FormatError> {
        const EXPECTED: &str = "array of integers or bools";
        let v = self.value(key)?;
        let a = v.as_array().ok_or_else(|| wrong_type(key, EXPECTED, v))?;
        if let Array::Bool(b) = a {
            return Ok(b.iter().map(|&x| u32::from(x)).collect());
        }
        if matches!(
            a,
            Array::String(_) | Array::F32(_) | Array::F64(_) | Array::Array(_)
        ) {
            return Err(wrong_type(key, EXPECTED, v));
        }
        (0..a.len())
            .map(|i| {
                let n = a.int_at(i).unwrap_or_default();
                u32::try_from(n).map_err(|_| FormatError::IntOutOfRange {
                    key: format!("{key}[{i}]"),
                    value: n,
                    expected: "u32",
                })
            })
            .collect()
    }

    fn opt<'s, T>(
        &'s self,
        key: &str,
        get: impl FnOnce(&'s Self, &str) -> Result<T, FormatError>,
    ) -> Result<Option<T>, FormatError> {
        if self.contains_key(key) {
            get(self, key).map(Some)
        } else {
            Ok(None)
        }
    }

    pub fn opt_u32(&self, key: &str) -> Result<Option<u32>, FormatError> {
        self.opt(key, Self::u32)
    }

    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>, FormatError> {
        self.opt(key, Self::u64)
    }

    pub fn opt_i64(&self, key: &str) -> Result<Option<i64>, FormatError> {
        self.opt(key, Self::i64)
    }

    pub fn opt_f32(&self, key: &str) -> Result<Option<f32>, FormatError> {
        self.opt(key, Self::f32)
    }

    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, FormatError> {
        self.opt(key, Self::bool)
    }

    pub fn opt_str(&self, key: &str) -> Result<Option<&str>, FormatError> {
        self.opt(key, Self::str)
    }

    pub fn opt_array(&self, key: &str) -> Result<Option<&Array>, FormatError> {
        self.opt(key, Self::array)
    }

    pub fn opt_str_array(&self, key: &str) -> Result<Option<&[String]>, FormatError> {
        self.opt(key, Self::str_array)
    }

    pub fn opt_f32_array(&self, key: &str) -> Result<Option<&[f32]>, FormatError> {
        self.opt(key, Self::f32_array)
    }

    pub fn opt_i32_array(&self, key: &str) -> Result<Option<&[i32]>, FormatError> {
        self.opt(key, Self::i32_array)
    }

    pub fn opt_u32_array_any(&self, key: &str) -> Result<Option<Vec<u32>>, FormatError> {
        self.opt(key, Self::u32_array_any)
    }
}

fn wrong_type(key: &str, expected: &'static str, found: &Value) -> FormatError {
    FormatError::WrongType {
        key: key.to_owned(),
        expected,
        found: found.type_name(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Metadata {
        let mut m = Metadata::new();
        m.insert("a.u32", 7u32).unwrap();
        m.insert("a.i32", -1i32).unwrap();
        m.insert("a.u64", u64::MAX).unwrap();
        m.insert("a.f64", 0.5f64).unwrap();
        m.insert("a.str", "hi").unwrap();
        m.insert("a.bools", vec![true, false]).unwrap();
        m.insert("a.i64s", vec![3i64, -4]).unwrap();
        m.insert("a.strs", vec!["x", "y"]).unwrap();
        m
    }

    #[test]
    fn integer_getters_accept_any_lossless_integer_type() {
        let m = table();
        assert_eq!(m.u64("a.u32").unwrap(), 7);
        assert_eq!(m.i64("a.i32").unwrap(), -1);
        assert!(matches!(
            m.u32("a.i32"),
            Err(FormatError::IntOutOfRange { value: -1, .. })
        ));
        assert!(matches!(
            m.u32("a.u64"),
            Err(FormatError::IntOutOfRange { .. })
        ));
        assert!(matches!(
            m.u32("a.str"),
            Err(FormatError::WrongType {
                expected: "u32",
                found: "string",
                ..
            })
        ));
        assert_eq!(m.f32("a.f64").unwrap(), 0.5);
    }

    #[test]
    fn optional_getters_fail_on_a_present_key_of_the_wrong_type() {
        let m = table();
        assert_eq!(m.opt_u32("nope").unwrap(), None);
        assert_eq!(m.opt_u32("a.u32").unwrap(), Some(7));
        assert!(m.opt_str("a.u32").is_err());
        assert!(matches!(m.str("nope"), Err(FormatError::MissingKey { .. })));
    }

    #[test]
    fn u32_array_any_reads_bools_and_ints_but_not_negative_ones() {
        let m = table();
        assert_eq!(m.u32_array_any("a.bools").unwrap(), vec![1, 0]);
        let err = m.u32_array_any("a.i64s").unwrap_err();
        assert!(
            matches!(&err, FormatError::IntOutOfRange { key, value: -4, .. } if key == "a.i64s[1]"),
            "{err}"
        );
        assert!(matches!(
            m.u32_array_any("a.strs"),
            Err(FormatError::WrongType {
                found: "array[string]",
                ..
            })
        ));
    }

    #[test]
    fn duplicate_insert_is_refused_and_order_is_kept() {
        let mut m = table();
        assert!(matches!(
            m.insert("a.str", 1u8),
            Err(FormatError::DuplicateKey { .. })
        ));
        m.set("a.str", "again");
        assert_eq!(
            m.iter().nth(4).map(|(k, v)| (k, v.as_str())),
            Some(("a.str", Some("again")))
        );
    }
}
