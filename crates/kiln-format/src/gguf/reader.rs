//! A cursor over the file's bytes whose every read is bounded: asking for more bytes than
//! remain is a [`FormatError::Truncated`] naming the field, never a panic.
//!
//! Field names are built lazily (closures), so the happy path allocates nothing for them.

use crate::FormatError;

pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// Bytes consumed so far (the offset of the next read).
    pub(crate) fn pos(&self) -> u64 {
        self.pos as u64
    }

    /// Bytes left after the cursor.
    pub(crate) fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    /// A [`FormatError::Truncated`] for `needed` bytes at the cursor.
    pub(crate) fn truncated(&self, field: String, needed: u64) -> FormatError {
        FormatError::Truncated {
            field,
            offset: self.pos(),
            needed,
            available: self.remaining(),
        }
    }

    /// Checks that `count` items of at least `min_size` encoded bytes each can still fit,
    /// before anything is allocated for them.
    pub(crate) fn ensure_room(
        &self,
        count: u64,
        min_size: u64,
        field: impl FnOnce() -> String,
    ) -> Result<(), FormatError> {
        match count.checked_mul(min_size) {
            Some(n) if n <= self.remaining() => Ok(()),
            Some(n) => Err(self.truncated(field(), n)),
            None => Err(self.truncated(field(), u64::MAX)),
        }
    }

    /// The next `n` bytes.
    pub(crate) fn take(
        &mut self,
        n: u64,
        field: impl FnOnce() -> String,
    ) -> Result<&'a [u8], FormatError> {
        if n > self.remaining() {
            return Err(self.truncated(field(), n));
        }
        // `n <= remaining <= usize::MAX`, so the conversion and the slice are in range.
        let n = n as usize;
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// The next `N` bytes as an array.
    pub(crate) fn array<const N: usize>(
        &mut self,
        field: impl FnOnce() -> String,
    ) -> Result<[u8; N], FormatError> {
        let bytes = self.take(N as u64, field)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub(crate) fn u32(&mut self, field: impl FnOnce() -> String) -> Result<u32, FormatError> {
        self.array(field).map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self, field: impl FnOnce() -> String) -> Result<u64, FormatError> {
        self.array(field).map(u64::from_le_bytes)
    }

    /// A GGUF string: a `u64` byte length, then that many bytes of UTF-8.
    pub(crate) fn string(
        &mut self,
        max_len: u64,
        field: impl Fn() -> String,
    ) -> Result<&'a str, FormatError> {
        let len = self.u64(|| format!("{} (length)", field()))?;
        if len > max_len {
            return Err(FormatError::LimitExceeded {
                what: "string length",
                key: field(),
                value: len,
                limit: max_len,
            });
        }
        let bytes = self.take(len, &field)?;
        std::str::from_utf8(bytes).map_err(|_| FormatError::InvalidUtf8 { field: field() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_past_the_end_names_the_field_and_keeps_position() {
        let mut c = Cursor::new(&[1, 0, 0, 0, 9]);
        assert_eq!(c.u32(|| "a".into()).unwrap(), 1);
        let err = c.u64(|| "b".into()).unwrap_err();
        match err {
            FormatError::Truncated {
                field,
                offset,
                needed,
                available,
            } => {
                assert_eq!((field.as_str(), offset, needed, available), ("b", 4, 8, 1));
            }
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(c.pos(), 4);
    }

    #[test]
    fn string_length_is_checked_before_the_bytes() {
        let mut bytes = u64::MAX.to_le_bytes().to_vec();
        bytes.extend_from_slice(b"abc");
        let err = Cursor::new(&bytes).string(100, || "s".into()).unwrap_err();
        assert!(
            matches!(
                err,
                FormatError::LimitExceeded {
                    value: u64::MAX,
                    ..
                }
            ),
            "{err:?}"
        );
        let err = Cursor::new(&bytes)
            .string(u64::MAX, || "s".into())
            .unwrap_err();
        assert!(
            matches!(
                err,
                FormatError::Truncated {
                    needed: u64::MAX,
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn ensure_room_survives_overflowing_products() {
        let c = Cursor::new(&[0; 16]);
        assert!(c.ensure_room(2, 8, String::new).is_ok());
        assert!(c.ensure_room(3, 8, String::new).is_err());
        assert!(c.ensure_room(u64::MAX, 24, String::new).is_err());
    }
}
