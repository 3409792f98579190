//! Directed push (EL's local variant, [`crate::algo::Graph::Push`]): no overlay is negotiated; each round a VN
//! sends its chunk to r peers drawn uniformly from its own Cyclon view, and accepts one chunk per round from
//! any allowed peer. No receiver knows its in-degree, so a push round ends at its deadline.

use rand_chacha::ChaCha12Rng;

/// The round's targets: `degree` peers drawn uniformly from `view` (all of it if smaller). They stand in for
/// a frozen overlay.
pub(crate) fn draw_targets<I: Clone>(view: &[I], degree: usize, rng: &mut ChaCha12Rng) -> Vec<I> {
    let fanout = degree.min(view.len());
    rand::seq::index::sample(rng, view.len(), fanout)
        .into_iter()
        .map(|i| view[i].clone())
        .collect()
}
