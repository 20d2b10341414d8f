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
    // 26 bytes or fewer, which halves the hashing per bot. Written into a stack buffer and
    // hashed in one call ([`digest::sha256`]).
    let mut input: SmallVec<[u8; 64]> = SmallVec::new();
    match hex16(dedup_key) {
        Some(raw) => {
            input.push(1);
            input.extend_from_slice(&raw);
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
    let digest = digest::sha256(&[&input]);
    let mut out = [0u8; 32];
    out[..4].copy_from_slice(b"swh-");
    for (pair, b) in out[4..].chunks_exact_mut(2).zip(&digest[..14]) {
        pair[0] = b"0123456789abcdef"[usize::from(b >> 4)];
        pair[1] = b"0123456789abcdef"[usize::from(b & 15)];
    }
    ClientOrderId::from_graphic(&out)
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

/// The first 16 bytes of a hex dedup key (64 lowercase hex characters), if it is one.
fn hex16(key: &str) -> Option<[u8; 16]> {
    let b = key.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let mut out = [0u8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        *o = nibble(b[2 * i])? << 4 | nibble(b[2 * i + 1])?;
    }
    Some(out)
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
        // Ids too long for one block take the streaming hasher, with the same input bytes.
        let long = client_order_id("a-strategy-with-a-long-name", &"ab".repeat(32), 1, "and-a-long-bot-id", 0);
        assert_eq!(long, client_order_id("a-strategy-with-a-long-name", &"ab".repeat(32), 1, "and-a-long-bot-id", 0));
    }

    #[test]
    fn a_hex_key_and_its_claim_time_change_the_id() {
        let key = "ab".repeat(32);
        let at = |ms| client_order_id("s1", &key, ms, "bot-1", 0);
        assert_ne!(at(1_705_676_400_000), at(1_705_676_700_000));
        assert_eq!(at(1_705_676_400_000), at(1_705_676_400_000));
    }
}
