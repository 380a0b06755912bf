//! Metadata values: the thirteen GGUF value types, arrays of them and arrays of arrays.

/// The type id stored before every metadata value (`gguf_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    /// The type for a raw id, `None` for ids outside 0..=12.
    pub fn from_id(id: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The raw id as stored in a file.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// A short lowercase name: `"u32"`, `"string"`, `"array"`.
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }

    /// Fewest bytes one value of this type occupies in a file (a string is at least its
    /// 8-byte length; an array at least its 4-byte type and 8-byte length). Used to bound
    /// counts by the bytes that remain before allocating.
    pub(crate) fn min_encoded_size(self) -> u64 {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A metadata array. All elements share one type; the elements of an array of arrays are
/// arrays that may each have their own element type.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
    Array(Vec<Array>),
}

impl Value {
    /// The value's GGUF type.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// The type's name for messages: `"u32"`, `"string"`, and for arrays the element type
    /// too (`"array[string]"`, see [`Array::type_name`]).
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Array(a) => a.type_name(),
            v => v.value_type().name(),
        }
    }

    /// The value as an integer if it is one of the eight integer types (not bool).
    pub fn as_int(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// The string, if this is a string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The array, if this is an array value.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl Array {
    /// Number of elements (for an array of arrays: the number of inner arrays).
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
            Array::Array(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The type every element has.
    pub fn elem_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::F32(_) => ValueType::F32,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F64(_) => ValueType::F64,
            Array::Array(_) => ValueType::Array,
        }
    }

    /// `"array[<element type>]"`, e.g. `"array[string]"`, `"array[array]"`.
    pub fn type_name(&self) -> &'static str {
        match self.elem_type() {
            ValueType::U8 => "array[u8]",
            ValueType::I8 => "array[i8]",
            ValueType::U16 => "array[u16]",
            ValueType::I16 => "array[i16]",
            ValueType::U32 => "array[u32]",
            ValueType::I32 => "array[i32]",
            ValueType::F32 => "array[f32]",
            ValueType::Bool => "array[bool]",
            ValueType::String => "array[string]",
            ValueType::Array => "array[array]",
            ValueType::U64 => "array[u64]",
            ValueType::I64 => "array[i64]",
            ValueType::F64 => "array[f64]",
        }
    }

    /// Element `i` as an integer, for arrays of one of the eight integer types.
    pub fn int_at(&self, i: usize) -> Option<i128> {
        Some(match self {
            Array::U8(v) => (*v.get(i)?).into(),
            Array::I8(v) => (*v.get(i)?).into(),
            Array::U16(v) => (*v.get(i)?).into(),
            Array::I16(v) => (*v.get(i)?).into(),
            Array::U32(v) => (*v.get(i)?).into(),
            Array::I32(v) => (*v.get(i)?).into(),
            Array::U64(v) => (*v.get(i)?).into(),
            Array::I64(v) => (*v.get(i)?).into(),
            _ => return None,
        })
    }

    /// Elements in this array and all arrays nested in it (an inner array counts as one
    /// element of its outer array, plus its own elements). This is what
    /// [`Limits::max_array_len`](crate::Limits::max_array_len) bounds.
    pub fn total_elements(&self) -> u64 {
        match self {
            Array::Array(inner) => inner.iter().fold(inner.len() as u64, |n, a| {
                n.saturating_add(a.total_elements())
            }),
            a => a.len() as u64,
        }
    }
}

macro_rules! conversions {
    ($($t:ty => $v:ident),* $(,)?) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Value {
                Value::$v(v)
            }
        }
        impl From<Vec<$t>> for Array {
            fn from(v: Vec<$t>) -> Array {
                Array::$v(v)
            }
        }
        impl From<Vec<$t>> for Value {
            fn from(v: Vec<$t>) -> Value {
                Value::Array(Array::$v(v))
            }
        }
    )*};
}

conversions! {
    u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32,
    bool => Bool, String => String, u64 => U64, i64 => I64, f64 => F64,
}

impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::String(v.to_owned())
    }
}

impl From<Vec<&str>> for Value {
    fn from(v: Vec<&str>) -> Value {
        Value::Array(Array::String(v.into_iter().map(str::to_owned).collect()))
    }
}

impl From<Array> for Value {
    fn from(v: Array) -> Value {
        Value::Array(v)
    }
}

impl From<Vec<Array>> for Array {
    fn from(v: Vec<Array>) -> Array {
        Array::Array(v)
    }
}

impl From<Vec<Array>> for Value {
    fn from(v: Vec<Array>) -> Value {
        Value::Array(Array::Array(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_id_round_trips() {
        for id in 0..=12 {
            assert_eq!(ValueType::from_id(id).map(ValueType::id), Some(id));
        }
        assert_eq!(ValueType::from_id(13), None);
    }

    #[test]
    fn nested_array_counts_all_elements() {
        let a = Array::Array(vec![
            Array::U8(vec![1, 2, 3]),
            Array::Array(vec![Array::Bool(vec![true])]),
        ]);
        assert_eq!(a.len(), 2);
        assert_eq!(a.total_elements(), 2 + 3 + 1 + 1);
        assert_eq!(Value::Array(a).type_name(), "array[array]");
    }
}
