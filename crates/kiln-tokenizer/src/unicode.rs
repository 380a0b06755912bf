//! Code point classes as llama.cpp's pre-tokenizers see them, and GPT-2's byte-level
//! alphabet.
//!
//! The classes are the Unicode general category groups (L, N, Z, M, P, S, C, unassigned)
//! plus White_Space, from the generated table in `unicode_data.rs` (Unicode 15.1, the
//! version llama.cpp's own tables are built from, so that every pre-tokenizer splits at
//! exactly the same places).

use crate::unicode_data::RANGES;

/// The class bits of one code point (or none, for a position outside the text).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Flags(u16);

impl Flags {
    const UNDEFINED: u16 = 0x001;
    const NUMBER: u16 = 0x002;
    const LETTER: u16 = 0x004;
    const PUNCTUATION: u16 = 0x020;
    const WHITESPACE: u16 = 0x100;

    /// The flags of a position past the end of the span being split: no class at all.
    pub(crate) const NONE: Flags = Flags(0);

    pub(crate) fn of(c: char) -> Flags {
        let cp = u32::from(c);
        if cp < 128 {
            return Flags(ASCII[cp as usize]);
        }
        Flags(lookup(cp))
    }

    /// `\p{L}`
    pub(crate) fn is_letter(self) -> bool {
        self.0 & Self::LETTER != 0
    }
    /// `\p{N}`
    pub(crate) fn is_number(self) -> bool {
        self.0 & Self::NUMBER != 0
    }
    /// `\p{P}`
    pub(crate) fn is_punctuation(self) -> bool {
        self.0 & Self::PUNCTUATION != 0
    }
    /// `\s`: the White_Space property.
    pub(crate) fn is_whitespace(self) -> bool {
        self.0 & Self::WHITESPACE != 0
    }
    /// A real code point (every assigned or unassigned code point has some class).
    pub(crate) fn is_some(self) -> bool {
        self.0 != 0
    }
    /// `[^\s\p{L}\p{N}]` for a real code point.
    pub(crate) fn is_other(self) -> bool {
        self.is_some() && self.0 & (Self::WHITESPACE | Self::LETTER | Self::NUMBER) == 0
    }
    #[cfg(test)]
    pub(crate) fn is_undefined(self) -> bool {
        self.0 & Self::UNDEFINED != 0
    }
}

fn lookup(cp: u32) -> u16 {
    // RANGES starts at 0, so the partition point is at least 1.
    let i = RANGES.partition_point(|&(start, _)| start <= cp);
    RANGES
        .get(i.wrapping_sub(1))
        .map_or(Flags::UNDEFINED, |&(_, f)| f)
}

static ASCII: [u16; 128] = {
    let mut t = [0u16; 128];
    let mut cp = 0;
    while cp < 128 {
        // The table is sorted; find the last range starting at or before `cp`.
        let mut i = 0;
        while i + 1 < RANGES.len() && RANGES[i + 1].0 <= cp as u32 {
            i += 1;
        }
        t[cp] = RANGES[i].1;
        cp += 1;
    }
    t
};

/// GPT-2's byte-to-character map: printable Latin-1 bytes stand for themselves, the other
/// 68 bytes are shifted, in order, to U+0100 and up.
pub(crate) static BYTE_TO_CHAR: [char; 256] = {
    let mut t = ['\0'; 256];
    let mut n = 0u32;
    let mut b = 0usize;
    while b < 256 {
        let printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        let cp = if printable {
            b as u32
        } else {
            n += 1;
            255 + n
        };
        t[b] = match char::from_u32(cp) {
            Some(c) => c,
            None => '\0',
        };
        b += 1;
    }
    t
};

/// The inverse of [`BYTE_TO_CHAR`] over U+0000..=U+0143 (the alphabet's whole range).
static CHAR_TO_BYTE: [i16; 0x144] = {
    let mut t = [-1i16; 0x144];
    let mut b = 0usize;
    while b < 256 {
        t[BYTE_TO_CHAR[b] as usize] = b as i16;
        b += 1;
    }
    t
};

/// The byte a byte-level character stands for, if it is one of the 256.
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    CHAR_TO_BYTE
        .get(c as usize)
        .and_then(|&b| u8::try_from(b).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_alphabet_round_trips_every_byte() {
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(BYTE_TO_CHAR[b as usize]), Some(b));
        }
        assert_eq!(BYTE_TO_CHAR[b' ' as usize], 'Ġ');
        assert_eq!(BYTE_TO_CHAR[b'\n' as usize], 'Ċ');
        assert_eq!(BYTE_TO_CHAR[b'A' as usize], 'A');
        assert_eq!(char_to_byte('ŉ'), None); // U+0149: past the alphabet
    }

    #[test]
    fn classes_follow_unicode_15_1() {
        assert!(Flags::of('a').is_letter());
        assert!(Flags::of('Ж').is_letter());
        assert!(Flags::of('7').is_number());
        assert!(Flags::of('½').is_number());
        assert!(Flags::of('²').is_number());
        assert!(Flags::of(' ').is_whitespace());
        assert!(Flags::of('\u{85}').is_whitespace());
        assert!(Flags::of('\u{3000}').is_whitespace());
        assert!(!Flags::of('\u{1c}').is_whitespace()); // not White_Space, unlike str::isspace
        assert!(Flags::of('!').is_punctuation());
        assert!(!Flags::of('$').is_punctuation());
        assert!(Flags::of('🦙').is_other());
        // U+31EF (CJK stroke HXG) arrived in Unicode 15.1; U+1C89 only in 16.0.
        assert!(Flags::of('\u{31EF}').is_other() && !Flags::of('\u{31EF}').is_undefined());
        assert!(Flags::of('\u{1C89}').is_undefined());
        assert!(Flags::of('\u{2EBF0}').is_letter());
    }
}
