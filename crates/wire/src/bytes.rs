//! Big-endian field access by named ranges. Callers check the buffer length against the
//! format's fixed size first; these helpers then index within it.

use crate::{Error, Side, Stock};
use core::ops::Range;

/// A field's byte range within its message.
pub(crate) type Field = Range<usize>;

macro_rules! getter {
    ($get:ident, $put:ident, $ty:ty) => {
        #[inline]
        pub(crate) fn $get(buf: &[u8], field: Field) -> $ty {
            debug_assert_eq!(field.len(), size_of::<$ty>());
            let mut b = [0u8; size_of::<$ty>()];
            b.copy_from_slice(&buf[field]);
            <$ty>::from_be_bytes(b)
        }

        #[inline]
        pub(crate) fn $put(buf: &mut [u8], field: Field, value: $ty) {
            debug_assert_eq!(field.len(), size_of::<$ty>());
            buf[field].copy_from_slice(&value.to_be_bytes());
        }
    };
}

getter!(get_u16, put_u16, u16);
getter!(get_u32, put_u32, u32);
getter!(get_u64, put_u64, u64);

/// Reads a fixed-size byte array field.
#[inline]
pub(crate) fn get_array<const N: usize>(buf: &[u8], field: Field) -> [u8; N] {
    debug_assert_eq!(field.len(), N);
    let mut b = [0u8; N];
    b.copy_from_slice(&buf[field]);
    b
}

/// Reads a 48-bit big-endian unsigned integer (ITCH timestamps).
#[inline]
pub(crate) fn get_u48(buf: &[u8], field: Field) -> u64 {
    debug_assert_eq!(field.len(), 6);
    let mut b = [0u8; 8];
    b[2..].copy_from_slice(&buf[field]);
    u64::from_be_bytes(b)
}

/// Writes a 48-bit big-endian unsigned integer; the caller checked `value < 2^48`.
#[inline]
pub(crate) fn put_u48(buf: &mut [u8], field: Field, value: u64) {
    debug_assert_eq!(field.len(), 6);
    debug_assert!(value < 1 << 48);
    buf[field].copy_from_slice(&value.to_be_bytes()[2..]);
}

/// A fixed-size field of an ITCH (or order) message.
pub(crate) trait WireField: Sized {
    /// Bytes on the wire.
    const LEN: usize;
    /// Reads from exactly `LEN` bytes.
    fn read(b: &[u8]) -> Result<Self, Error>;
    /// Writes to exactly `LEN` bytes.
    fn write(&self, b: &mut [u8]);
}

impl WireField for u8 {
    const LEN: usize = 1;
    fn read(b: &[u8]) -> Result<Self, Error> {
        Ok(b[0])
    }
    fn write(&self, b: &mut [u8]) {
        b[0] = *self;
    }
}

macro_rules! int_field {
    ($ty:ty, $get:ident, $put:ident) => {
        impl WireField for $ty {
            const LEN: usize = size_of::<$ty>();
            fn read(b: &[u8]) -> Result<Self, Error> {
                Ok($get(b, 0..Self::LEN))
            }
            fn write(&self, b: &mut [u8]) {
                $put(b, 0..Self::LEN, *self);
            }
        }
    };
}
int_field!(u16, get_u16, put_u16);
int_field!(u32, get_u32, put_u32);
int_field!(u64, get_u64, put_u64);

impl<const N: usize> WireField for [u8; N] {
    const LEN: usize = N;
    fn read(b: &[u8]) -> Result<Self, Error> {
        Ok(get_array(b, 0..N))
    }
    fn write(&self, b: &mut [u8]) {
        b.copy_from_slice(self);
    }
}

impl WireField for Stock {
    const LEN: usize = 8;
    fn read(b: &[u8]) -> Result<Self, Error> {
        <[u8; 8]>::read(b).map(Self)
    }
    fn write(&self, b: &mut [u8]) {
        self.0.write(b);
    }
}

impl WireField for Side {
    const LEN: usize = 1;
    fn read(b: &[u8]) -> Result<Self, Error> {
        Self::from_byte(b[0]).ok_or(Error::Malformed)
    }
    fn write(&self, b: &mut [u8]) {
        b[0] = self.to_byte();
    }
}

/// Whether `fields` (offset, length) tile `0..len` exactly, in order.
pub(crate) const fn layout_ok(fields: &[(usize, usize)], len: usize) -> bool {
    let mut at = 0;
    let mut i = 0;
    while i < fields.len() {
        if fields[i].0 != at {
            return false;
        }
        at += fields[i].1;
        i += 1;
    }
    at == len
}

/// Declares a `u8`-coded enum with `to_byte`/`from_byte` and a [`WireField`] impl that
/// rejects unknown bytes as [`Error::Malformed`].
macro_rules! byte_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $byte:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )*
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &[Self] = &[$(Self::$variant),*];

            /// The wire byte.
            pub const fn to_byte(self) -> u8 {
                match self {
                    $( Self::$variant => $byte, )*
                }
            }

            /// From the wire byte; `None` if unknown.
            pub const fn from_byte(b: u8) -> Option<Self> {
                match b {
                    $( $byte => Some(Self::$variant), )*
                    _ => None,
                }
            }
        }

        impl $crate::bytes::WireField for $name {
            const LEN: usize = 1;
            fn read(b: &[u8]) -> Result<Self, $crate::Error> {
                Self::from_byte(b[0]).ok_or($crate::Error::Malformed)
            }
            fn write(&self, b: &mut [u8]) {
                b[0] = self.to_byte();
            }
        }
    };
}
pub(crate) use byte_enum;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let mut buf = [0u8; 16];
        put_u16(&mut buf, 0..2, 0x0102);
        put_u32(&mut buf, 2..6, 0x0304_0506);
        put_u48(&mut buf, 6..12, 0x0708_090a_0b0c);
        assert_eq!(buf[..12], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        assert_eq!(get_u16(&buf, 0..2), 0x0102);
        assert_eq!(get_u32(&buf, 2..6), 0x0304_0506);
        assert_eq!(get_u48(&buf, 6..12), 0x0708_090a_0b0c);
        put_u64(&mut buf, 8..16, u64::MAX - 1);
        assert_eq!(get_u64(&buf, 8..16), u64::MAX - 1);
        assert_eq!(get_array::<2>(&buf, 0..2), [1, 2]);
    }
}
