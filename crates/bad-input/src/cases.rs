//! The corrupted copies: truncations, bit flips and extreme field values.

/// One corrupted input: what was done to it, and its bytes.
#[derive(Debug, Clone)]
pub struct Case {
    pub label: String,
    pub bytes: Vec<u8>,
}

impl Case {
    pub fn new(label: impl Into<String>, bytes: Vec<u8>) -> Self {
        Case {
            label: label.into(),
            bytes,
        }
    }
}

/// The file cut short: empty, every length up to 64 bytes in steps of 7, then at a quarter,
/// half and three quarters of its length, and one byte short.
pub fn truncations(good: &[u8]) -> Vec<Case> {
    let n = good.len();
    let mut at: Vec<usize> = (0..64).step_by(7).collect();
    at.extend([n / 4, n / 2, 3 * n / 4, n.saturating_sub(1)]);
    at.retain(|&k| k < n);
    at.sort_unstable();
    at.dedup();
    at.into_iter()
        .map(|k| Case::new(format!("truncated to {k} of {n} bytes"), good[..k].to_vec()))
        .collect()
}

/// `count` corrupted copies at a fixed `seed`: half with one flipped bit, half with a burst of
/// 2-16 flips. Flips favour the first 4 KiB, where headers live, three times in four.
pub fn bit_flips(good: &[u8], seed: u64, count: usize) -> Vec<Case> {
    if good.is_empty() {
        return Vec::new();
    }
    let mut rng = SplitMix64(seed);
    (0..count)
        .map(|i| {
            let mut bytes = good.to_vec();
            let flips = if i % 2 == 0 {
                1
            } else {
                2 + rng.below(15) as usize
            };
            let mut at = Vec::with_capacity(flips);
            for _ in 0..flips {
                let span = if rng.below(4) < 3 {
                    good.len().min(4096)
                } else {
                    good.len()
                };
                let byte = rng.below(span as u64) as usize;
                let bit = rng.below(8) as u8;
                bytes[byte] ^= 1 << bit;
                at.push(format!("{byte}.{bit}"));
            }
            Case::new(
                format!("seed {seed} case {i}: bits flipped at {}", at.join(",")),
                bytes,
            )
        })
        .collect()
}

/// Fields at each of `offsets` overwritten, one at a time, with 0, all ones and the signed
/// maximum, as 1-, 2-, 4- and 8-byte little-endian integers (and 0x7FFF.. big-endian for
/// big-endian formats).
pub fn extreme_values(good: &[u8], offsets: &[usize]) -> Vec<Case> {
    let mut out = Vec::new();
    for &off in offsets {
        for width in [1usize, 2, 4, 8] {
            if off + width > good.len() {
                continue;
            }
            let ones = vec![0xFFu8; width];
            let zeros = vec![0u8; width];
            let mut max_le = vec![0xFFu8; width];
            max_le[width - 1] = 0x7F;
            let mut max_be = vec![0xFFu8; width];
            max_be[0] = 0x7F;
            for (name, value) in [
                ("0", zeros),
                ("all ones", ones),
                ("signed max LE", max_le),
                ("signed max BE", max_be),
            ] {
                let mut bytes = good.to_vec();
                bytes[off..off + width].copy_from_slice(&value);
                out.push(Case::new(
                    format!("{width}-byte field at {off} set to {name}"),
                    bytes,
                ));
            }
        }
    }
    out
}

/// For a text file: each of the first `limit` numeric tokens replaced, one at a time, by
/// values a reader must not trust: 0, -1, 2^64-1, 1e308, -1e308, NaN, inf, 1e-300 and a
/// 40-digit integer.
pub fn extreme_numbers(good: &str, limit: usize) -> Vec<Case> {
    const VALUES: [&str; 9] = [
        "0",
        "-1",
        "18446744073709551615",
        "1e308",
        "-1e308",
        "NaN",
        "inf",
        "1e-300",
        "1234567890123456789012345678901234567890",
    ];
    let mut out = Vec::new();
    for (start, end) in number_spans(good).into_iter().take(limit) {
        for v in VALUES {
            let text = format!("{}{v}{}", &good[..start], &good[end..]);
            out.push(Case::new(
                format!("number at byte {start} ({}) set to {v}", &good[start..end]),
                text.into_bytes(),
            ));
        }
    }
    out
}

/// Byte ranges of numeric tokens: a run of digits with optional sign, point and exponent.
fn number_spans(text: &str) -> Vec<(usize, usize)> {
    let b = text.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let starts_number = b[i].is_ascii_digit()
            || ((b[i] == b'-' || b[i] == b'.') && b.get(i + 1).is_some_and(u8::is_ascii_digit));
        let after_word = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if starts_number && !after_word {
            let start = i;
            i += 1;
            while i < b.len()
                && (b[i].is_ascii_digit()
                    || b[i] == b'.'
                    || ((b[i] == b'e' || b[i] == b'E')
                        && b.get(i + 1)
                            .is_some_and(|c| c.is_ascii_digit() || *c == b'-' || *c == b'+'))
                    || ((b[i] == b'-' || b[i] == b'+') && (b[i - 1] == b'e' || b[i - 1] == b'E')))
            {
                i += 1;
            }
            spans.push((start, i));
        } else {
            i += 1;
        }
    }
    spans
}

/// A small, fixed, portable generator (SplitMix64): the same cases on every machine.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncations_are_strictly_shorter_and_distinct() {
        let good: Vec<u8> = (0..200).map(|i| i as u8).collect();
        let cases = truncations(&good);
        assert!(cases.iter().all(|c| c.bytes.len() < good.len()));
        assert_eq!(cases[0].bytes.len(), 0);
        assert_eq!(cases.last().unwrap().bytes.len(), 199);
    }

    #[test]
    fn bit_flips_change_the_file_and_repeat_for_a_seed() {
        let good = vec![0u8; 5000];
        let a = bit_flips(&good, 3, 20);
        let b = bit_flips(&good, 3, 20);
        assert_eq!(a.len(), 20);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.bytes, y.bytes);
        }
        // A single flip always changes the file (a burst may flip one bit twice).
        assert!(a[0].bytes != good);
        assert!(
            bit_flips(&good, 4, 20)[0].bytes != a[0].bytes
                || a[2].bytes != bit_flips(&good, 4, 20)[2].bytes
        );
    }

    #[test]
    fn extreme_numbers_find_every_number_token() {
        let spans = number_spans("v1 12 -3.5e-2 x .5\n7");
        let found: Vec<&str> = spans
            .iter()
            .map(|&(s, e)| &"v1 12 -3.5e-2 x .5\n7"[s..e])
            .collect();
        assert_eq!(found, ["12", "-3.5e-2", ".5", "7"]);
        let cases = extreme_numbers("n 12\n", 5);
        assert_eq!(cases.len(), 9);
        assert!(cases.iter().any(|c| c.bytes == b"n 18446744073709551615\n"));
    }

    #[test]
    fn extreme_values_stay_inside_the_file() {
        let good = vec![1u8; 6];
        let cases = extreme_values(&good, &[0, 4, 10]);
        // offset 0: widths 1,2,4 fit; offset 4: widths 1,2; offset 10: none.
        assert_eq!(cases.len(), (3 + 2) * 4);
        assert!(cases.iter().all(|c| c.bytes.len() == 6));
    }
}
