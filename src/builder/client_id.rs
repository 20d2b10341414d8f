//! Client order ids: one per processed delivery, bot, step and part, so a resend of one
//! stored request is never a second order, and the same body processed again after the
//! dedup window is a new one.

use crate::digest;
use crate::model::ClientOrderId;
use smallvec::SmallVec;

/// The client order id: derived from the strategy, the dedup key, the moment that key was
/// claimed (`claimed_ms`, Unix milliseconds), the bot and the step. A resend of the same
/// stored request keeps its id, so it can never become a second order at brokers that
/// honour client order ids; the same body processed again after the dedup window is
/// claimed at another moment and gets new ids, so such a broker takes it as the new trade
/// it is rather than refusing it as a repeat. 32 characters, within every broker's limit.
pub fn client_order_id(
    strategy_id: &str,
    dedup_key: &str,
    claimed_ms: i64,
    bot_id: &str,
    step: usize,
) -> ClientOrderId {
    client_order_id_part(strategy_id, dedup_key, claimed_ms, bot_id, step, 0)
}

/// The client order id of the `part`-th order of one step, for steps that yield several
/// (a MODIFY that cancels and places anew, a CANCEL of several working orders, a CLOSE of
/// several option structures and the cancels of the position's working exits). Part 0
/// is [`client_order_id`].
pub fn client_order_id_part(
    strategy_id: &str,
    dedup_key: &str,
    claimed_ms: i64,
    bot_id: &str,
    step: usize,
    part: usize,
) -> ClientOrderId {
    // The dedup key is itself a SHA-256 digest, so its first 128 bits, raw, identify the
    // delivery; with the claim time, short length prefixes and varint step and part, the
    // whole input fits one SHA-256 block (55 bytes) when the strategy and bot ids come to
    // 26 bytes or fewer, which halves the hashing per bot.
    let mut block = [0u8; 64];
    let digest = if one_block(&mut block, dedup_key, claimed_ms, strategy_id, bot_id, step, part) {
        digest::compress_one(&block)
    } else {
        let raw = hex16(dedup_key);
        digest::sha256(&[&streamed_input(raw.as_ref(), dedup_key, claimed_ms, strategy_id, bot_id, step, part)])
    };
    ClientOrderId::swh(&digest)
}

/// The usual input (a hex dedup key, short ids, step and part under 128) written straight
/// into its one padded SHA-256 block, `block` (all zeros on the way in: the padding is
/// not written): the same bytes [`streamed_input`] gives, without a growable buffer.
/// False when the input does not fit one block (`block` is then partly written and
/// unused). Everything, the key's raw bytes too, is written where the caller hashes it:
/// each copy of bytes just written a byte at a time, read back as words, stalled on
/// store forwarding.
fn one_block(
    block: &mut [u8; 64],
    dedup_key: &str,
    claimed_ms: i64,
    strategy_id: &str,
    bot_id: &str,
    step: usize,
    part: usize,
) -> bool {
    let (s, b) = (strategy_id.as_bytes(), bot_id.as_bytes());
    let (Ok(step @ 0..0x80), Ok(part @ 0..0x80)) = (u8::try_from(step), u8::try_from(part)) else {
        return false;
    };
    // 1 + 16 + 8, two length bytes, the ids, one byte each for step and part.
    let len = 27 + s.len() + b.len() + 2;
    if len > digest::ONE_BLOCK {
        return false;
    }
    let Some(raw) = block.get_mut(1..17).and_then(|r| r.try_into().ok()) else { return false };
    if !hex16_into(dedup_key, raw) {
        return false;
    }
    block[0] = 1;
    block[17..25].copy_from_slice(&claimed_ms.to_le_bytes());
    // Both lengths are under 55 here, so each is one length byte.
    block[25] = s.len() as u8;
    let mut at = 26;
    block[at..at + s.len()].copy_from_slice(s);
    at += s.len();
    block[at] = b.len() as u8;
    at += 1;
    block[at..at + b.len()].copy_from_slice(b);
    at += b.len();
    block[at] = step;
    block[at + 1] = part;
    block[len] = 0x80;
    block[56..].copy_from_slice(&(len as u64 * 8).to_be_bytes());
    true
}

/// The hashed input in full, for the rare ids that do not fit one block.
#[cold]
fn streamed_input(
    raw: Option<&[u8; 16]>,
    dedup_key: &str,
    claimed_ms: i64,
    strategy_id: &str,
    bot_id: &str,
    step: usize,
    part: usize,
) -> SmallVec<[u8; 64]> {
    let mut input: SmallVec<[u8; 64]> = SmallVec::new();
    match raw {
        Some(raw) => {
            input.push(1);
            input.extend_from_slice(raw);
        }
        None => {
            input.push(0);
            field(&mut input, dedup_key.as_bytes());
        }
    }
    input.extend_from_slice(&claimed_ms.to_le_bytes());
    field(&mut input, strategy_id.as_bytes());
    field(&mut input, bot_id.as_bytes());
    varint(&mut input, step as u64);
    varint(&mut input, part as u64);
    input
}

/// A length-prefixed field: one byte for lengths under 255, else 255 and eight bytes, so
/// no two different field lists hash the same input.
fn field(out: &mut SmallVec<[u8; 64]>, bytes: &[u8]) {
    match u8::try_from(bytes.len()) {
        Ok(n) if n < u8::MAX => out.push(n),
        _ => {
            out.push(u8::MAX);
            out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        }
    }
    out.extend_from_slice(bytes);
}

/// LEB128: one byte under 128, and prefix-free, so step and part stay apart.
fn varint(out: &mut SmallVec<[u8; 64]>, mut n: u64) {
    loop {
        let low = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(low);
            return;
        }
        out.push(low | 0x80);
    }
}

/// The value of each lowercase hexadecimal digit, 16 for any other byte.
const NIBBLE: [u8; 256] = {
    let mut t = [16u8; 256];
    let mut i = 0;
    while i < 16 {
        t[digest::HEX_DIGITS[i] as usize] = i as u8;
        i += 1;
    }
    t
};

/// The first 16 bytes of a hex dedup key (64 lowercase hex characters), if it is one.
fn hex16(key: &str) -> Option<[u8; 16]> {
    let mut out = [0u8; 16];
    hex16_into(key, &mut out).then_some(out)
}

/// [`hex16`] into `out`; false (and `out` unchanged) when the key is not one.
fn hex16_into(key: &str, out: &mut [u8; 16]) -> bool {
    let b = key.as_bytes();
    if b.len() != 64 {
        return false;
    }
    // Only the half that is used must be hex.
    let half = &b[..32];
    if half.iter().fold(0u8, |bad, c| bad | NIBBLE[usize::from(*c)]) & 16 != 0 {
        return false;
    }
    for (o, pair) in out.iter_mut().zip(half.chunks_exact(2)) {
        *o = NIBBLE[usize::from(pair[0])] << 4 | NIBBLE[usize::from(pair[1])];
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_order_ids_are_stable_and_distinct() {
        let a = client_order_id("s", "k", 1, "bot", 0);
        assert_eq!(a, client_order_id("s", "k", 1, "bot", 0));
        assert_eq!(a.len(), 32);
        assert!(a.starts_with("swh-"));
        assert_ne!(a, client_order_id("s", "k", 1, "bot", 1));
        assert_ne!(a, client_order_id("s", "k2", 1, "bot", 0));
        assert_ne!(a, client_order_id("s", "k", 2, "bot", 0), "another claim of the same key");
        assert_ne!(client_order_id("ab", "c", 1, "d", 0), client_order_id("a", "bc", 1, "d", 0));
        assert_ne!(client_order_id_part("s", "k", 1, "b", 1, 0), client_order_id_part("s", "k", 1, "b", 0, 1));
        assert_ne!(client_order_id_part("s", "k", 1, "b", 0, 128), client_order_id_part("s", "k", 1, "b", 0, 0));
    }

    /// The ids are stored with their orders and sent to brokers, so their derivation is
    /// fixed: these are what the earlier streaming hash gave (and what Python's hashlib gives
    /// for the same input bytes).
    #[test]
    fn the_derivation_is_pinned() {
        assert_eq!(
            client_order_id("s1", &"ab".repeat(32), 1_705_676_400_000, "bot-1", 0),
            "swh-01070378fde8aad1b54434b04ad1"
        );
        assert_eq!(client_order_id("s", "k", 1, "bot", 1), "swh-d6e04e28c1b4fecf5eea368cd99e");
        // Inputs past one block take the streaming hasher: ids over 26 bytes together, steps and parts of two
        // varint bytes, a key that is no hex digest, a field of 255 bytes or more. Each pinned to what Python's
        // hashlib gives for the documented bytes (0x01 + the key's first 16 bytes raw, or 0x00 + the key as a
        // field; claimed_ms as i64 LE; the two ids as fields, a length byte or 0xff + u64 LE; LEB128 step, part).
        let ab = "ab".repeat(32);
        assert_eq!(
            client_order_id("a-strategy-with-a-long-name", &ab, 1, "and-a-long-bot-id", 0),
            "swh-8bbbe27d66d3049d9b3d1a9d7841"
        );
        assert_eq!(client_order_id_part("s", &ab, -7, "b", 300, 130), "swh-468d800f5b30f5393730478f166a");
        assert_eq!(client_order_id("s", &"k".repeat(300), 1, "b", 0), "swh-8fbda12bc10fa0d5f39b52d48638");
        assert_eq!(client_order_id("x".repeat(260).as_str(), &ab, 1, "b", 1), "swh-f5619e5480bef979f106680b932c");
    }

    /// The block written in place hashes the same bytes as the streamed input, at every
    /// id length across the one-block edge, and for steps and parts around one varint byte.
    #[test]
    fn the_one_block_path_hashes_the_streamed_input() {
        let keys = ["ab".repeat(32), format!("{}{}", "0f".repeat(16), "xy".repeat(16)), "k".into(), "AB".repeat(32)];
        for key in &keys {
            let raw = hex16(key);
            for (ids, (step, part)) in (0..40).zip([(0, 0), (1, 2), (127, 127), (128, 0), (0, 300)].into_iter().cycle())
            {
                let (s, b) = ("s".repeat(ids / 2 + 1), "b".repeat(ids - ids / 2));
                let streamed = streamed_input(raw.as_ref(), key, -7, &s, &b, step, part);
                let want = digest::sha256(&[&streamed]);
                assert_eq!(client_order_id_part(&s, key, -7, &b, step, part), ClientOrderId::swh(&want));
                let mut block = [0u8; 64];
                if one_block(&mut block, key, -7, &s, &b, step, part) {
                    assert_eq!(digest::compress_one(&block), want, "{s} {b} {step} {part}");
                }
            }
        }
        // Only the first half of a hex key is read, as before.
        assert!(hex16(&keys[1]).is_some());
        assert!(hex16(&keys[3]).is_none());
    }

    #[test]
    fn a_hex_key_and_its_claim_time_change_the_id() {
        let key = "ab".repeat(32);
        let at = |ms| client_order_id("s1", &key, ms, "bot-1", 0);
        assert_ne!(at(1_705_676_400_000), at(1_705_676_700_000));
        assert_eq!(at(1_705_676_400_000), at(1_705_676_400_000));
    }
}
