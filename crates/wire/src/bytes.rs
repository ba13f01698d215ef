//! Big-endian field access by named ranges. Callers check the buffer length against the
//! format's fixed size first; these helpers then index within it.

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
