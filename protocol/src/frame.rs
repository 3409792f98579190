//! Length-prefixed framing. Every message travels as a 4-byte little-endian length followed by that many
//! bytes. The reader checks the announced length against the limit of the protocol it is reading *before*
//! allocating, so a peer cannot make us reserve memory by lying about a length.

use crate::{DecodeError, EncodeError};

/// Size of the length prefix in bytes.
pub const LENGTH_PREFIX_BYTES: usize = 4;

/// Encodes the prefix of a payload of `len` bytes, refusing payloads over `max` (a bug at the sender: the
/// receiver would refuse them anyway).
pub fn encode_prefix(len: usize, max: usize) -> Result<[u8; LENGTH_PREFIX_BYTES], EncodeError> {
    if len > max {
        return Err(EncodeError::TooLarge {
            what: "frame",
            got: len as u64,
            max: max as u64,
        });
    }
    // `max` is always far below u32::MAX for our protocols, so the cast is exact.
    Ok((len as u32).to_le_bytes())
}

/// Reads the payload length announced by a prefix and checks it against `max`.
pub fn decode_prefix(prefix: [u8; LENGTH_PREFIX_BYTES], max: usize) -> Result<usize, DecodeError> {
    let len = u32::from_le_bytes(prefix) as usize;
    if len > max {
        return Err(DecodeError::TooLarge {
            what: "frame",
            got: len as u64,
            max: max as u64,
        });
    }
    Ok(len)
}

/// Appends `payload` with its prefix to `out`.
pub fn write_frame(payload: &[u8], max: usize, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    out.extend_from_slice(&encode_prefix(payload.len(), max)?);
    out.extend_from_slice(payload);
    Ok(())
}

/// Splits one frame off the front of `buf`: returns its payload and the bytes after it. For byte buffers
/// (tests, fuzzing, stream reassembly); async readers use [`decode_prefix`] directly.
pub fn split_frame(buf: &[u8], max: usize) -> Result<(&[u8], &[u8]), DecodeError> {
    let Some((prefix, rest)) = buf.split_first_chunk::<LENGTH_PREFIX_BYTES>() else {
        return Err(DecodeError::Truncated {
            what: "frame prefix",
            need: LENGTH_PREFIX_BYTES,
            have: buf.len(),
        });
    };
    let len = decode_prefix(*prefix, max)?;
    if rest.len() < len {
        return Err(DecodeError::Truncated {
            what: "frame",
            need: len,
            have: rest.len(),
        });
    }
    Ok(rest.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn oversized_prefix_is_refused_before_reading_the_payload() {
        let buf = 1_000_000u32.to_le_bytes();
        let err = split_frame(&buf, 1024).unwrap_err();
        assert!(matches!(
            err,
            DecodeError::TooLarge {
                got: 1_000_000,
                max: 1024,
                ..
            }
        ));
    }

    #[test]
    fn truncated_frames_are_refused() {
        assert!(matches!(
            split_frame(&[1, 0], 16),
            Err(DecodeError::Truncated {
                what: "frame prefix",
                ..
            })
        ));
        assert!(matches!(
            split_frame(&[4, 0, 0, 0, 1, 2], 16),
            Err(DecodeError::Truncated {
                what: "frame",
                need: 4,
                have: 2
            })
        ));
    }

    #[test]
    fn sender_refuses_oversized_payload() {
        let mut out = Vec::new();
        assert!(write_frame(&[0; 17], 16, &mut out).is_err());
        assert!(out.is_empty());
    }

    proptest! {
        #[test]
        fn frames_round_trip(payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8)) {
            let mut buf = Vec::new();
            for p in &payloads {
                write_frame(p, 64, &mut buf).unwrap();
            }
            let mut rest = &buf[..];
            for p in &payloads {
                let (payload, r) = split_frame(rest, 64).unwrap();
                prop_assert_eq!(payload, &p[..]);
                rest = r;
            }
            prop_assert!(rest.is_empty());
        }

        #[test]
        fn split_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = split_frame(&buf, 64);
        }
    }
}
