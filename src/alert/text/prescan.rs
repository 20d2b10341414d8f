//! A linear pre-scan that bounds what the grammar is given.
//!
//! pest's cost grows with the number of items in a text more than with its length: each word
//! is tried against several rules, each try costs calls and their bookkeeping (about 1.5 µs a
//! word here), and a body of pairs that names no field is read twice, as pairs and then as
//! words. A 256 KiB body of short items (`k=v k=v …`, `@ @ …`) took 0.1–0.2 s, and a run of
//! blanks costs as much per character as a short word costs per word. A real alert holds a few
//! dozen words, so one pass over the bytes weighs what pest would have to do, and a text that
//! weighs more than [`MAX_WORDS`] words is refused before pest sees it.

/// The most words a plain-text alert may hold. The largest real alerts we know, a JSON-looking
/// object with four option legs written one member per line, or pairs with a sentence-long
/// comment, hold under 150.
///
/// Other pieces are weighed against words by what they cost pest: a bracket weighs half a
/// word, a punctuation mark (`. ! ? )`) one, a word longer than 64 bytes one more per further
/// 64 bytes (or part), and every 16 bytes of a run of spacing or separators half a word. So
/// whatever passes is at most about 40 KiB, with at most 1,024 brackets.
pub const MAX_WORDS: usize = 512;

/// What [`weigh`] counts for a word, so a bracket (the cheapest item) can weigh one unit.
const WORD: usize = 2;

/// The pre-scan's budget in [`weigh`]'s units.
pub const BUDGET: usize = MAX_WORDS * WORD;

/// The most a single byte can add to [`weigh`]'s answer (a punctuation mark), so a text of
/// at most `BUDGET / MAX_WEIGHT_PER_BYTE` bytes is always within the budget.
pub const MAX_WEIGHT_PER_BYTE: usize = WORD;

/// A word's bytes per unit of its weight beyond the first (pest reads symbols and numbers
/// one character at a time).
const WORD_CHUNK: usize = 64;

/// Bytes of a run of blanks per unit of weight.
const GAP_CHUNK: usize = 8;

/// Weighs the text in units of half a word (see [`MAX_WORDS`]), stopping as soon as the
/// weight passes `limit`: the answer is then above `limit`, though not the full weight.
///
/// Gaps are what the grammar's `gap` rule matches (space, tab, no-break space, `;`, `,`, line
/// breaks and the two characters `\n`); marks are where the grammar starts a new item inside
/// a run of non-gap characters: brackets (each a JSON-looking value) and the punctuation that
/// ends a word. Counting marks on their own keeps the weight an upper bound on the items pest
/// tries whatever the text: `a)a)a)…` has no gap but as many items as characters.
pub fn weigh(text: &str, limit: usize) -> usize {
    let bytes = text.as_bytes();
    let mut weight = 0;
    // The length of the current run of word bytes, or of gap bytes.
    let mut word = 0;
    let mut gap = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let gap_len = match b {
            b' ' | b'\t' | b';' | b',' | b'\n' | b'\r' => 1,
            // U+00A0, the no-break space, is C2 A0 in UTF-8.
            0xC2 if bytes.get(i + 1) == Some(&0xA0) => 2,
            b'\\' if bytes.get(i + 1) == Some(&b'n') => 2,
            _ => 0,
        };
        if gap_len > 0 {
            word = 0;
            gap += gap_len;
            if gap % GAP_CHUNK < gap_len {
                // Crossed a multiple of GAP_CHUNK.
                weight += 1;
            }
            i += gap_len;
        } else {
            gap = 0;
            match b {
                b'{' | b'}' | b'[' | b']' => {
                    word = 0;
                    weight += 1;
                }
                b'.' | b'!' | b'?' | b')' => {
                    word = 0;
                    weight += WORD;
                }
                _ => {
                    if word % WORD_CHUNK == 0 {
                        weight += WORD;
                    }
                    word += 1;
                }
            }
            i += 1;
        }
        if weight > limit {
            return weight;
        }
    }
    weight
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_LIMIT: usize = usize::MAX;

    #[test]
    fn weighs_words_marks_and_brackets() {
        assert_eq!(weigh("", NO_LIMIT), 0);
        assert_eq!(weigh("buy long AAPL", NO_LIMIT), 3 * WORD);
        assert_eq!(weigh("ticker=AAPL;action=buy\naction=sell", NO_LIMIT), 3 * WORD);
        assert_eq!(weigh("a\\nb\u{A0}c,d", NO_LIMIT), 4 * WORD);
        // A mark is a word of its own, so `190.25` weighs three.
        assert_eq!(weigh("buy AAPL @ 190.25", NO_LIMIT), 6 * WORD);
        assert_eq!(weigh(r#"{"a":[1, 2]}"#, NO_LIMIT), 4 + 3 * WORD);
        assert_eq!(weigh("a)a)a)", NO_LIMIT), 6 * WORD);
        // Non-ASCII letters are part of a word, whatever their bytes.
        assert_eq!(weigh("é 😀 ü\u{A1}", NO_LIMIT), 3 * WORD);
    }

    #[test]
    fn long_words_and_long_blanks_weigh_more() {
        assert_eq!(weigh(&"a".repeat(64), NO_LIMIT), WORD);
        assert_eq!(weigh(&"a".repeat(65), NO_LIMIT), 2 * WORD);
        assert_eq!(weigh(&"a".repeat(64 * 10), NO_LIMIT), 10 * WORD);
        assert_eq!(weigh(&format!("a{}b", " ".repeat(7)), NO_LIMIT), 2 * WORD);
        assert_eq!(weigh(&format!("a{}b", " ".repeat(8)), NO_LIMIT), 2 * WORD + 1);
        assert_eq!(weigh(&format!("a{}b", " ".repeat(80)), NO_LIMIT), 2 * WORD + 10);
        // A two-byte blank that straddles a multiple of eight still counts once.
        assert_eq!(weigh(&format!("a{}\u{A0}b", " ".repeat(7)), NO_LIMIT), 2 * WORD + 1);
    }

    #[test]
    fn no_byte_weighs_more_than_the_maximum() {
        for b in 0..=127u8 {
            let text = char::from(b).to_string().repeat(100);
            assert!(weigh(&text, NO_LIMIT) <= 100 * MAX_WEIGHT_PER_BYTE, "{b}");
        }
        for text in ["\u{A0}", "\\n", "é", "😀", "a.", "a b"] {
            let text = text.repeat(100);
            assert!(weigh(&text, NO_LIMIT) <= text.len() * MAX_WEIGHT_PER_BYTE, "{text}");
        }
    }

    #[test]
    fn stops_past_the_limit() {
        assert_eq!(weigh(&"k=v ".repeat(65_536), BUDGET), BUDGET + WORD);
        assert_eq!(weigh(&"[".repeat(2000), BUDGET), BUDGET + 1);
        assert_eq!(weigh(&"a ".repeat(MAX_WORDS), BUDGET), BUDGET);
        assert!(weigh(&"a".repeat(256 * 1024), BUDGET) > BUDGET);
        assert!(weigh(&" ".repeat(256 * 1024), BUDGET) > BUDGET);
    }
}
