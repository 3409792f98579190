//! The paper's dropout model (Shatter, PETS 2025, Appendix E): each round every real node participates or
//! not; a node that did not participate in the previous round is 10% more likely to drop out again (the
//! "dropout correlation factor"). A node that drops out does no training, sharing or aggregation in that
//! round, and its VNs drop out with it.
//!
//! The schedule is drawn once, from the node's own seeded stream, for the whole run: its VNs must know
//! which rounds to stay out of before those rounds' overlays are negotiated (they negotiate ahead).
//! "10% more likely" is read as a relative increase, p · (1 + 0.1), capped at 1; the paper does not say.

use rand::Rng;

/// Relative increase of the dropout probability after a round the node missed (Appendix E: 10%).
pub const DROPOUT_CORRELATION: f64 = 0.1;

/// Whether the node takes part in each of `rounds` rounds with dropout rate `rate` (0 ≤ rate ≤ 1).
pub fn participation(rate: f64, rounds: u64, rng: &mut impl Rng) -> Vec<bool> {
    let mut took_part = true;
    (0..rounds)
        .map(|_| {
            let p = if took_part {
                rate
            } else {
                (rate * (1.0 + DROPOUT_CORRELATION)).min(1.0)
            };
            took_part = !(p > 0.0 && rng.random::<f64>() < p);
            took_part
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha12Rng;

    #[test]
    fn rates_match_and_a_missed_round_makes_the_next_likelier_to_miss() {
        let mut rng = ChaCha12Rng::seed_from_u64(1);
        assert!(participation(0.0, 100, &mut rng).iter().all(|p| *p));
        assert!(participation(1.0, 100, &mut rng).iter().all(|p| !*p));
        let s = participation(0.5, 200_000, &mut rng);
        let dropped = s.iter().filter(|p| !**p).count() as f64 / s.len() as f64;
        // Stationary share of a two-state chain with 0.5 after a taken round, 0.55 after a missed one:
        // 0.5 / (1 − 0.55 + 0.5) = 0.526.
        assert!((dropped - 0.526).abs() < 0.005, "{dropped}");
        let after_missed = s
            .windows(2)
            .filter(|w| !w[0])
            .map(|w| !w[1] as u32 as f64)
            .collect::<Vec<_>>();
        let p = after_missed.iter().sum::<f64>() / after_missed.len() as f64;
        assert!((p - 0.55).abs() < 0.01, "{p}");
    }
}
