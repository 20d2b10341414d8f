//! SHA-256 of the short inputs hashed on every delivery: a message id's dedup key and each
//! request's client order id. An input of up to 55 bytes fits one padded block, which is
//! given straight to the compression function; the streaming hasher's buffering and
//! bookkeeping cost about as much again as the block itself. Longer inputs take the
//! streaming hasher. Both give the same digest, which stored keys and client order ids
//! depend on.

use sha2::{Digest, Sha256};

/// Longest input hashed as one block: 64 bytes less the `0x80` pad byte and the 8-byte
/// length.
pub const ONE_BLOCK: usize = 55;

/// SHA-256 of the concatenation of `parts`.
pub fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    if len > ONE_BLOCK {
        let mut h = Sha256::new();
        parts.iter().for_each(|p| h.update(p));
        return h.finalize().into();
    }
    let mut block = [0u8; 64];
    let mut at = 0;
    for p in parts {
        block[at..at + p.len()].copy_from_slice(p);
        at += p.len();
    }
    block[len] = 0x80;
    block[56..].copy_from_slice(&(len as u64 * 8).to_be_bytes());
    compress_one(&block)
}

/// SHA-256 of a message that the caller has already padded into one block (`0x80` after
/// its at most [`ONE_BLOCK`] bytes, zeros, its length in bits big-endian in the last eight).
pub fn compress_one(block: &[u8; 64]) -> [u8; 32] {
    // SHA-256's initial hash value (FIPS 180-4, 5.3.3).
    let mut state: [u32; 8] =
        [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];
    sha2::compress256(&mut state, std::slice::from_ref(block.into()));
    let mut out = [0u8; 32];
    for (o, word) in out.chunks_exact_mut(4).zip(state) {
        o.copy_from_slice(&word.to_be_bytes());
    }
    out
}

/// The digits of lowercase hexadecimal, in order.
pub const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Writes `bytes` into `out` as lowercase hexadecimal, two digits a byte, as far as `out`
/// reaches (`out` is at most twice as long as `bytes`). Dedup keys and client order ids are
/// written this way on every delivery: both digits of a byte in one lookup.
pub fn hex_into(out: &mut [u8], bytes: &[u8]) {
    const PAIRS: [[u8; 2]; 256] = {
        let mut t = [[0u8; 2]; 256];
        let mut b = 0;
        while b < 256 {
            t[b] = [HEX_DIGITS[b >> 4], HEX_DIGITS[b & 15]];
            b += 1;
        }
        t
    };
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair.copy_from_slice(&PAIRS[usize::from(*b)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-block path gives the streaming hasher's digest at every length, across the
    /// 55/56-byte edge where it hands over, however the input is split into parts.
    #[test]
    fn one_block_matches_the_streaming_hash() {
        for len in 0..=130usize {
            let input: Vec<u8> = (0..len).map(|i| (i * 37 % 251) as u8).collect();
            let want: [u8; 32] = Sha256::digest(&input).into();
            assert_eq!(sha256(&[&input]), want, "{len} bytes");
            let (a, b) = input.split_at(len / 3);
            assert_eq!(sha256(&[a, b, &[]]), want, "{len} bytes in parts");
        }
        // A known digest, so that both paths cannot drift together: SHA-256("abc").
        let abc = sha256(&[b"a", b"bc"]);
        assert_eq!(abc[..4], [0xba, 0x78, 0x16, 0xbf]);
        assert_eq!(abc[28..], [0xf2, 0x00, 0x15, 0xad]);
    }

    #[test]
    fn hex_is_two_lowercase_digits_a_byte() {
        let bytes: Vec<u8> = (0..=255).collect();
        let mut out = vec![0u8; 512];
        hex_into(&mut out, &bytes);
        let want: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(std::str::from_utf8(&out).unwrap(), want);
        // A shorter `out` takes the leading bytes only.
        let mut short = [0u8; 4];
        hex_into(&mut short, &[0xab, 0xcd, 0xef]);
        assert_eq!(&short, b"abcd");
    }
}
