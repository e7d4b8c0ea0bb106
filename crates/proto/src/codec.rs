//! The little-endian binary codec used for every message body and stored record.
//!
//! Every integer is written little-endian whatever the host. Decoding checks every
//! length against the bytes actually present before allocating, so a hostile frame can
//! neither panic the decoder nor make it allocate more than the frame it arrived in.

use thiserror::Error;

/// Why a body could not be decoded.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The input ended before the value did.
    #[error("truncated: needed {needed} more bytes for {what}")]
    Truncated { what: &'static str, needed: usize },
    /// A tag or enum discriminant was not one this version knows.
    #[error("unknown {what} tag {tag}")]
    UnknownTag { what: &'static str, tag: u32 },
    /// A string was not UTF-8.
    #[error("invalid UTF-8 in {what}")]
    Utf8 { what: &'static str },
    /// A value was out of its allowed range.
    #[error("invalid {what}: {why}")]
    Invalid { what: &'static str, why: String },
    /// Bytes were left over after the value.
    #[error("{0} trailing bytes")]
    Trailing(usize),
}

/// A cursor over bytes being decoded; never reads past its end.
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Starts decoding `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    /// Bytes not yet consumed.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// Takes the next `n` bytes.
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Truncated {
                what,
                needed: n - self.buf.len(),
            });
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    /// Takes a fixed-size array.
    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let bytes = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// Fails unless every byte was consumed.
    pub fn finish(self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Trailing(self.buf.len()))
        }
    }

    /// Checks that `count` items of at least `min_size` bytes each can still be present,
    /// so a forged count cannot trigger a huge allocation.
    pub fn check_count(
        &self,
        count: usize,
        min_size: usize,
        what: &'static str,
    ) -> Result<(), DecodeError> {
        let need = count.saturating_mul(min_size.max(1));
        if need > self.buf.len() {
            return Err(DecodeError::Truncated {
                what,
                needed: need - self.buf.len(),
            });
        }
        Ok(())
    }
}

/// A value with a fixed little-endian wire form.
pub trait Wire: Sized {
    /// The smallest number of bytes an encoded value occupies (bounds forged counts).
    const MIN_SIZE: usize;
    /// Appends the encoding of `self` to `out`.
    fn put(&self, out: &mut Vec<u8>);
    /// Decodes one value from `r`.
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError>;
    /// Appends the encodings of `items` in order (a vector's elements): one at a
    /// time, unless the type knows a faster way to the same bytes.
    fn put_all(items: &[Self], out: &mut Vec<u8>) {
        for item in items {
            item.put(out);
        }
    }
    /// Decodes `n` values from `r` (a vector's elements, their count checked
    /// against what is left): one at a time, unless the type knows a faster way.
    fn get_all(r: &mut Reader<'_>, n: usize) -> Result<Vec<Self>, DecodeError> {
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(Self::get(r)?);
        }
        Ok(v)
    }
}

/// Encodes a value into a fresh buffer.
pub fn encode<T: Wire>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    value.put(&mut out);
    out
}

/// Decodes exactly one value from `buf`, rejecting trailing bytes.
pub fn decode<T: Wire>(buf: &[u8]) -> Result<T, DecodeError> {
    let mut r = Reader::new(buf);
    let v = T::get(&mut r)?;
    r.finish()?;
    Ok(v)
}

macro_rules! wire_int {
    ($($t:ty),*) => {$(
        impl Wire for $t {
            const MIN_SIZE: usize = std::mem::size_of::<$t>();
            fn put(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
                Ok(<$t>::from_le_bytes(r.array(stringify!($t))?))
            }
        }
    )*};
}
wire_int!(u16, u32, u64, i32, i64);

/// Bytes: a vector of them (a record, a blob) is copied whole.
impl Wire for u8 {
    const MIN_SIZE: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        out.push(*self);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(r.array::<1>("u8")?[0])
    }
    fn put_all(items: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(items);
    }
    fn get_all(r: &mut Reader<'_>, n: usize) -> Result<Vec<u8>, DecodeError> {
        Ok(r.take(n, "bytes")?.to_vec())
    }
}

impl Wire for bool {
    const MIN_SIZE: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match u8::get(r)? {
            0 => Ok(false),
            1 => Ok(true),
            t => Err(DecodeError::UnknownTag {
                what: "bool",
                tag: u32::from(t),
            }),
        }
    }
}

impl Wire for String {
    const MIN_SIZE: usize = 4;
    fn put(&self, out: &mut Vec<u8>) {
        put_bytes(self.as_bytes(), out);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let bytes = get_bytes(r, "string")?;
        String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::Utf8 { what: "string" })
    }
}

impl<T: Wire> Wire for Vec<T> {
    const MIN_SIZE: usize = 4;
    fn put(&self, out: &mut Vec<u8>) {
        put_len(self.len(), out);
        T::put_all(self, out);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = u32::get(r)? as usize;
        r.check_count(n, T::MIN_SIZE, "vector")?;
        T::get_all(r, n)
    }
}

impl<T: Wire> Wire for Option<T> {
    const MIN_SIZE: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                v.put(out);
            }
        }
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match u8::get(r)? {
            0 => Ok(None),
            1 => Ok(Some(T::get(r)?)),
            t => Err(DecodeError::UnknownTag {
                what: "option",
                tag: u32::from(t),
            }),
        }
    }
}

impl<A: Wire, B: Wire> Wire for (A, B) {
    const MIN_SIZE: usize = A::MIN_SIZE + B::MIN_SIZE;
    fn put(&self, out: &mut Vec<u8>) {
        self.0.put(out);
        self.1.put(out);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok((A::get(r)?, B::get(r)?))
    }
}

/// Writes a collection length as u32 (collections are bounded far below 4 G entries).
pub fn put_len(len: usize, out: &mut Vec<u8>) {
    assert!(len <= u32::MAX as usize, "collection too long for the wire");
    (len as u32).put(out);
}

/// Writes a length-prefixed byte string.
pub fn put_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    put_len(bytes.len(), out);
    out.extend_from_slice(bytes);
}

/// Reads a length-prefixed byte string without copying.
pub fn get_bytes<'a>(r: &mut Reader<'a>, what: &'static str) -> Result<&'a [u8], DecodeError> {
    let n = u32::get(r)? as usize;
    r.take(n, what)
}

/// Implements [`Wire`] for a struct by encoding its fields in declaration order.
#[macro_export]
macro_rules! wire_struct {
    ($name:ident { $($field:ident : $ty:ty),* $(,)? }) => {
        impl $crate::codec::Wire for $name {
            const MIN_SIZE: usize = 0 $(+ <$ty as $crate::codec::Wire>::MIN_SIZE)*;
            fn put(&self, out: &mut Vec<u8>) {
                $( $crate::codec::Wire::put(&self.$field, out); )*
            }
            fn get(r: &mut $crate::codec::Reader<'_>) -> Result<Self, $crate::codec::DecodeError> {
                Ok($name { $( $field: <$ty as $crate::codec::Wire>::get(r)?, )* })
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_forged_counts() {
        let v: Vec<(u64, String)> = vec![(1, "a".into()), (u64::MAX, "é".into())];
        let bytes = encode(&v);
        assert_eq!(decode::<Vec<(u64, String)>>(&bytes).unwrap(), v);
        // A count of 2^32-1 elements in a 4-byte body must fail before allocating.
        let forged = u32::MAX.to_le_bytes();
        assert!(decode::<Vec<u64>>(&forged).is_err());
        assert!(matches!(
            decode::<u32>(&[1, 2, 3, 4, 5]),
            Err(DecodeError::Trailing(1))
        ));
        assert!(decode::<bool>(&[2]).is_err());
        assert!(decode::<String>(&[1, 0, 0, 0, 0xff]).is_err());
    }
}
