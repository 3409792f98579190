//! Crowding a victim (issue 44, item 2): a whole rogue node — all k = 8 identities of one listed node, each
//! deviation of `sim::Rogue` alone and all together — is a neighbour of a victim node's VNs, and receives the
//! victim's chunk copies, no more often than 1.5 × an honest node's expected share, over 50 rounds (16 nodes
//! × 8 VNs, r = 8, seeds 1-3).
//!
//! An honest node's expected share, per victim VN and round, is k·r/(N − 1) (each of the victim VN's r
//! neighbours is one of the N − 1 other VNs, k of which are the node's); its expected copies of the victim's
//! chunks per round are k times that (every victim VN sends its chunk to each of its neighbours). The rogue's
//! share is measured per victim VN (the largest of the k) and summed over them (copies), seed by seed.
//!
//! The short test runs every deviation together for one seed (a few seconds); the per-deviation tests run
//! seeds 1-3 and are ignored in CI (3-4 minutes in all on two cores):
//! `cargo test --release -p sampling --test crowding -- --ignored --nocapture`. Before the repeat cap
//! (`sampling::OverlayConfig::repeat_cap`) every one of them failed but the quiet reference (`view_flooding`
//! already at the flood with siblings: 0.82 and 0.86 per victim VN on seeds 1 and 2);
//! `results/insider/summary.md` has the figures.

use std::time::Duration;

use sampling::sim::{Crowding, DirectKind, Rogue, SimConfig, crowding};

const NODES: u32 = 16;
const K: u32 = 8;
const DEGREE: usize = 8;
const ROUNDS: usize = 50;
const N: usize = (NODES * K) as usize;
const SEEDS: [u64; 3] = [1, 2, 3];

/// The victim node's VNs (node 0) and the rogue node's (node 15); nodes 1-14 are honest.
fn victims() -> Vec<u32> {
    (0..K).collect()
}
fn rogue_ids() -> Vec<u32> {
    (N as u32 - K..N as u32).collect()
}

/// An honest node's expected neighbourships per victim VN and round, k·r/(N − 1).
fn expected_share() -> f64 {
    K as f64 * DEGREE as f64 / (N as f64 - 1.0)
}

fn run(rogue: Rogue, hide_origin: bool, seed: u64) -> Crowding {
    let mut cfg = SimConfig::new(N, DEGREE, seed);
    cfg.warmup = cfg.cyclon.period * 10;
    cfg.overlay.hide_origin = hide_origin;
    crowding(cfg, K, rogue, ROUNDS).unwrap()
}

/// The rogue's pushes come twice per sub-step.
fn every() -> Duration {
    SimConfig::new(N, DEGREE, 1).overlay.substep / 2
}

/// Runs `make` over `seeds`, prints the figures and checks the bound seed by seed.
fn check(name: &str, make: impl Fn() -> Rogue, hide_origin: bool, seeds: &[u64]) {
    let share = expected_share();
    let mut failed = Vec::new();
    for &seed in seeds {
        let o = run(make(), hide_origin, seed);
        eprintln!(
            "{name} (hidden walks: {hide_origin}) seed {seed}: rogue node per victim VN and round (most \
             crowded VN) {:.3}, copies per round {:.2}, distinct chunks per round {:.2}; honest node mean: \
             copies {:.2}, chunks {:.2}; expected per VN {share:.3}, copies {:.2}; victim VNs short of r \
             {:.3}; rogue messages {}",
            o.rogue_max_vn,
            o.rogue_copies,
            o.rogue_chunks,
            o.honest_copies,
            o.honest_chunks,
            share * K as f64,
            o.victim_deficient,
            o.sent,
        );
        assert!(
            o.sent > 1000,
            "{name}: the rogue sent only {} messages",
            o.sent
        );
        assert!((o.expected_copies - share * K as f64).abs() < 1e-9);
        if o.rogue_max_vn > 1.5 * share || o.rogue_copies > 1.5 * share * K as f64 {
            failed.push((seed, o.rogue_max_vn, o.rogue_copies));
        }
    }
    assert!(
        failed.is_empty(),
        "{name}: (seed, per VN, copies) over 1.5 × the expected {share:.3} / {:.2}: {failed:?}",
        share * K as f64
    );
}

#[test]
fn every_deviation_together_stays_within_one_and_a_half_honest_shares() {
    let all = || Rogue::all(rogue_ids(), victims(), every(), DirectKind::Sibling);
    check("all together", all, false, &[1]);
}

/// The reference: the same node with every deviation off is an honest node (its share is the honest one).
#[test]
#[ignore]
fn a_quiet_rogue_gets_an_honest_share() {
    for seed in SEEDS {
        let o = run(Rogue::quiet(rogue_ids(), victims(), every()), false, seed);
        eprintln!(
            "quiet seed {seed}: rogue per VN (max) {:.3}, copies {:.2}, chunks {:.2}; honest copies {:.2}, \
             chunks {:.2}; expected per VN {:.3}; victim short of r {:.3}",
            o.rogue_max_vn,
            o.rogue_copies,
            o.rogue_chunks,
            o.honest_copies,
            o.honest_chunks,
            expected_share(),
            o.victim_deficient
        );
        assert!(o.rogue_copies <= 1.5 * expected_share() * K as f64);
        assert!(
            (o.honest_copies - expected_share() * K as f64).abs()
                < 0.1 * expected_share() * K as f64
        );
    }
}

fn with(f: impl Fn(&mut Rogue)) -> impl Fn() -> Rogue {
    move || {
        let mut r = Rogue::quiet(rogue_ids(), victims(), every());
        f(&mut r);
        r
    }
}

#[test]
#[ignore]
fn direct_named_proposals() {
    check(
        "direct, named",
        with(|r| r.direct = Some(DirectKind::Named)),
        false,
        &SEEDS,
    );
}

#[test]
#[ignore]
fn direct_proposals_for_a_sibling() {
    check(
        "direct, sibling",
        with(|r| r.direct = Some(DirectKind::Sibling)),
        false,
        &SEEDS,
    );
}

#[test]
#[ignore]
fn direct_hidden_proposals() {
    check(
        "direct, hidden",
        with(|r| r.direct = Some(DirectKind::Hidden)),
        true,
        &SEEDS,
    );
}

#[test]
#[ignore]
fn greedy_acceptance() {
    check("greedy", with(|r| r.greedy = true), false, &SEEDS);
}

/// Forged answers need walks to answer: the flood brings the victims' walks to the rogue's identities.
/// With hidden walks, so that the rewriting of relayed answers is exercised as well.
#[test]
#[ignore]
fn forged_and_rewritten_answers() {
    let f = with(|r| {
        r.forge = true;
        r.flood = true;
    });
    check("forge + flood (siblings)", &f, true, &SEEDS);
    check("forge + flood (siblings), named walks", f, false, &SEEDS);
}

#[test]
#[ignore]
fn view_flooding() {
    check("flood, siblings", with(|r| r.flood = true), false, &SEEDS);
    let junk = with(|r| {
        r.flood = true;
        r.junk = true;
    });
    check("flood, junk", junk, false, &SEEDS);
}

#[test]
#[ignore]
fn every_deviation_together() {
    for kind in [DirectKind::Named, DirectKind::Sibling] {
        let all = move || Rogue::all(rogue_ids(), victims(), every(), kind);
        check(&format!("all together ({kind:?})"), all, false, &SEEDS);
    }
    let all = || Rogue::all(rogue_ids(), victims(), every(), DirectKind::Hidden);
    check("all together (Hidden)", all, true, &SEEDS);
}
