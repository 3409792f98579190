//! Cyclon gossip peer sampling (S. Voulgaris, D. Gavidia, M. van Steen, "CYCLON: Inexpensive Membership
//! Management for Unstructured P2P Overlays", J. Network and Systems Management 13(2), 2005), sans-IO.
//!
//! Each VN keeps a view of at most c entries (peer, age). Every `period` it runs one shuffle (§3.2,
//! "enhanced shuffling"):
//! 1. age every entry by one;
//! 2. pick the oldest entry Q as the target and l−1 other random entries, and remove Q from the view;
//! 3. send Q the l−1 entries plus a fresh entry of itself (age 0);
//! 4. Q answers with up to l random entries of its own view and merges what it got;
//! 5. both ends merge received entries: drop self and entries already in the view, fill empty slots first,
//!    then replace the entries they sent.
//!
//! One deviation from the paper, against a listed but hostile peer: each entry remembers which peer
//! supplied it (the authenticated sender of the shuffle it came in, or none for bootstrap entries), and a
//! merge takes at most [`CyclonConfig::max_per_supplier`] entries in the view from any one supplier. Without
//! it, a peer repeating shuffle requests replaces the l entries the victim answers with each time, and a few
//! requests fill the whole view with entries of the attacker's choosing (DESIGN §7: a victim whose view is
//! the attacker's proposes only to the attacker's VNs). With it, one peer holds at most l of the c slots
//! at any time however often it shuffles; honest Cyclon rarely reaches the bound (a shuffle brings at most l
//! entries from one peer, and later shuffles replace them).
//!
//! A shuffle that gets no reply within `shuffle_timeout` (or whose send fails) leaves Q removed: this is how
//! crashed peers leave the views (the oldest entry is always shuffled next, so a dead entry is probed within
//! a bounded number of periods once it is the oldest). A VN joins with a list of bootstrap peers; its fresh
//! self entries then spread through its shuffles.
//!
//! A second deviation: a VN whose view has emptied (every entry removed by failed shuffles and failed
//! sends, as happens to some VNs when a network is overloaded and replies come late) takes
//! [`CyclonConfig::shuffle_len`] random bootstrap peers back into its view at its next shuffle, instead of
//! staying without anyone to shuffle with for the rest of the run.

use std::time::Duration;

use protocol::control::{CyclonMsg, MAX_AGE, MAX_SHUFFLE_ENTRIES, ViewEntry};
use rand::Rng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand_chacha::ChaCha12Rng;

use crate::{Error, PeerId};

/// Cyclon parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct CyclonConfig {
    /// View size c. 20 is the smallest cache Voulgaris et al. evaluate (§5, c = 20, 50, 100) and DESIGN §5's
    /// choice: with N ≤ a few thousand VNs it keeps the view graph connected and the in-degree spread small.
    pub view_size: usize,
    /// Shuffle length l. 8 as in the Cyclon paper's experiments (§5) and DESIGN §5.
    pub shuffle_len: usize,
    /// Time between two shuffles of one VN. DESIGN §5 asks for ≥ 4 shuffles per training round.
    pub period: Duration,
    /// A shuffle without a reply after this long counts as failed and leaves its target removed.
    pub shuffle_timeout: Duration,
}

impl Default for CyclonConfig {
    fn default() -> Self {
        Self {
            view_size: 20,
            shuffle_len: 8,
            period: Duration::from_secs(1),
            shuffle_timeout: Duration::from_millis(500),
        }
    }
}

impl CyclonConfig {
    /// The most entries of the view that one supplier may have put there: one shuffle's worth, l.
    pub fn max_per_supplier(&self) -> usize {
        self.shuffle_len
    }

    pub fn validate(&self) -> Result<(), Error> {
        if self.view_size == 0 || self.shuffle_len == 0 {
            return Err(Error::Config(
                "view_size and shuffle_len must be positive".into(),
            ));
        }
        if self.shuffle_len > self.view_size || self.shuffle_len > MAX_SHUFFLE_ENTRIES {
            return Err(Error::Config(format!(
                "shuffle_len {} must be ≤ view_size {} and ≤ MAX_SHUFFLE_ENTRIES {}",
                self.shuffle_len, self.view_size, MAX_SHUFFLE_ENTRIES
            )));
        }
        if self.period.is_zero() || self.shuffle_timeout.is_zero() {
            return Err(Error::Config(
                "period and shuffle_timeout must be positive".into(),
            ));
        }
        Ok(())
    }
}

/// What the caller feeds a [`Cyclon`].
#[derive(Debug, Clone)]
pub enum CyclonInput<I> {
    /// A message from `from` (the authenticated sender).
    Message { from: I, msg: CyclonMsg<I> },
    /// A send to `to` could not be delivered (dial failure, connection reset, peer refused).
    SendFailed { to: I },
    /// Time passed; due timers fire. Any input also fires due timers first.
    Tick,
}

/// What a [`Cyclon`] asks its caller to do or tells it.
#[derive(Debug, Clone, PartialEq)]
pub enum CyclonOutput<I> {
    Send {
        to: I,
        msg: CyclonMsg<I>,
    },
    /// A shuffle with `peer` failed (timeout or send failure); `peer` was removed from the view.
    ShuffleTimedOut {
        peer: I,
    },
    /// A message was refused by validation (counted, ignored).
    Invalid {
        from: I,
    },
}

#[derive(Debug, Clone)]
struct Pending<I> {
    target: I,
    sent: Vec<I>,
    deadline: Duration,
}

/// One VN's Cyclon state.
#[derive(Debug, Clone)]
pub struct Cyclon<I> {
    me: I,
    cfg: CyclonConfig,
    view: Vec<ViewEntry<I>>,
    /// The ids of `view`, in its order, rebuilt whenever a call may have changed it (`join`, `restore`,
    /// `handle`): the overlay chooses its walks' hops from them on every one of its inputs, many times per
    /// view change, and copying the view for each was 1.4 % of the default testnet run's CPU.
    ids: Vec<I>,
    /// `supplier[i]`: the peer whose shuffle brought `view[i]` (None: a bootstrap entry). Kept beside the
    /// view rather than in [`ViewEntry`], which is the wire type: a supplier is never sent.
    supplier: Vec<Option<I>>,
    rng: ChaCha12Rng,
    next_shuffle: Option<Duration>,
    pending: Option<Pending<I>>,
    /// The peers given at [`Cyclon::join`] (from the local peer list, never from the wire): where an emptied
    /// view starts again.
    bootstrap: Vec<I>,
}

impl<I: PeerId> Cyclon<I> {
    /// A Cyclon instance for `me`. `rng` must be seeded from (run seed, identity): siblings must not share
    /// streams. Shuffling starts after [`Cyclon::join`] or [`Cyclon::start`].
    pub fn new(me: I, cfg: CyclonConfig, rng: ChaCha12Rng) -> Result<Self, Error> {
        cfg.validate()?;
        Ok(Self {
            me,
            cfg,
            view: Vec::new(),
            ids: Vec::new(),
            supplier: Vec::new(),
            rng,
            next_shuffle: None,
            pending: None,
            bootstrap: Vec::new(),
        })
    }

    pub fn id(&self) -> &I {
        &self.me
    }

    pub fn config(&self) -> &CyclonConfig {
        &self.cfg
    }

    /// The current view entries (order is internal but deterministic).
    pub fn entries(&self) -> &[ViewEntry<I>] {
        &self.view
    }

    /// The peers of the current view.
    pub fn peers(&self) -> Vec<I> {
        self.ids.clone()
    }

    /// The peers of the current view, in view order, without a copy.
    pub fn peer_ids(&self) -> &[I] {
        &self.ids
    }

    /// Rebuilds [`Self::peer_ids`] after the view may have changed.
    fn refresh_ids(&mut self) {
        self.ids.clear();
        self.ids.extend(self.view.iter().map(|e| e.id.clone()));
    }

    pub fn contains(&self, id: &I) -> bool {
        self.view.iter().any(|e| &e.id == id)
    }

    /// Join: put up to c bootstrap peers (age 0) into the view and start shuffling. The first shuffle is
    /// delayed by a random fraction of the period so VNs that join together (e.g. siblings) do not shuffle in
    /// lockstep.
    pub fn join(&mut self, now: Duration, bootstrap: impl IntoIterator<Item = I>) {
        let mut seen = std::collections::BTreeSet::new();
        self.bootstrap = bootstrap
            .into_iter()
            .filter(|id| *id != self.me && seen.insert(id.clone()))
            .collect();
        for id in self.bootstrap.clone() {
            if self.view.len() >= self.cfg.view_size {
                break;
            }
            if !self.contains(&id) {
                self.view.push(ViewEntry { id, age: 0 });
                self.supplier.push(None);
            }
        }
        self.refresh_ids();
        self.start(now);
    }

    /// An emptied view starts again from up to `shuffle_len` random bootstrap peers (module doc).
    fn rejoin(&mut self) {
        let mut idx: Vec<usize> = (0..self.bootstrap.len()).collect();
        idx.shuffle(&mut self.rng);
        for i in idx.into_iter().take(self.cfg.shuffle_len) {
            self.view.push(ViewEntry {
                id: self.bootstrap[i].clone(),
                age: 0,
            });
            self.supplier.push(None);
        }
    }

    /// Restores a saved view (what [`Cyclon::entries`] returned before a restart) and starts shuffling, so a
    /// restarted VN rejoins through the peers it knew, with their ages (the oldest is probed first, as
    /// before). Nothing in `saved` is trusted: this VN itself, repeated peers and entries beyond c are
    /// skipped and ages are capped at `MAX_AGE`. Call it before [`Cyclon::join`], which then fills what is
    /// left of the view from the bootstrap list.
    pub fn restore(&mut self, now: Duration, saved: impl IntoIterator<Item = ViewEntry<I>>) {
        for e in saved {
            if self.view.len() >= self.cfg.view_size {
                break;
            }
            if e.id != self.me && !self.contains(&e.id) {
                self.view.push(ViewEntry {
                    id: e.id,
                    age: e.age.min(MAX_AGE),
                });
                // Who supplied it is not saved: restored entries count as bootstrap ones.
                self.supplier.push(None);
            }
        }
        self.refresh_ids();
        self.start(now);
    }

    /// Start the shuffle timer (no-op if already running).
    pub fn start(&mut self, now: Duration) {
        if self.next_shuffle.is_none() {
            let jitter = self.cfg.period.mul_f64(self.rng.random::<f64>());
            self.next_shuffle = Some(now + jitter);
        }
    }

    /// Invariants, for tests and simulations (run after every event): the view holds at most c entries,
    /// never this VN, never one peer twice, and no age above `MAX_AGE`; [`Self::peer_ids`] are its ids.
    pub fn check_invariants(&self) -> Result<(), String> {
        let fail = |what: String| Err(format!("cyclon of {:?}: {what}", self.me));
        if self.supplier.len() != self.view.len() {
            return fail(format!(
                "{} suppliers for {} entries",
                self.supplier.len(),
                self.view.len()
            ));
        }
        if self.view.len() > self.cfg.view_size {
            return fail(format!(
                "{} entries > c = {}",
                self.view.len(),
                self.cfg.view_size
            ));
        }
        for (i, e) in self.view.iter().enumerate() {
            if e.id == self.me {
                return fail("itself in its view".into());
            }
            if self.view[..i].iter().any(|o| o.id == e.id) {
                return fail(format!("{:?} twice in its view", e.id));
            }
            if e.age > MAX_AGE {
                return fail(format!("age {} > MAX_AGE", e.age));
            }
        }
        for s in self.supplier.iter().flatten() {
            let held = self.supplied_by(s);
            if held > self.cfg.max_per_supplier() {
                return fail(format!(
                    "{held} entries from {s:?} > {}",
                    self.cfg.max_per_supplier()
                ));
            }
        }
        if !self.ids.iter().eq(self.view.iter().map(|e| &e.id)) {
            return fail("peer ids out of step with the view".into());
        }
        Ok(())
    }

    /// The earliest time the caller must call `handle(.., Tick)` (the `poll_timeout` contract: ask after every
    /// `handle`; there is no timer output).
    pub fn next_timeout(&self) -> Option<Duration> {
        match (self.next_shuffle, self.pending.as_ref().map(|p| p.deadline)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn handle(&mut self, now: Duration, input: CyclonInput<I>, out: &mut Vec<CyclonOutput<I>>) {
        self.fire_timers(now, out);
        match input {
            CyclonInput::Tick => {}
            CyclonInput::SendFailed { to } => {
                if let Some(i) = self.view.iter().position(|e| e.id == to) {
                    self.remove_at(i);
                }
                if self.pending.as_ref().is_some_and(|p| p.target == to) {
                    self.pending = None;
                    out.push(CyclonOutput::ShuffleTimedOut { peer: to });
                }
            }
            CyclonInput::Message { from, msg } => {
                if msg.validate().is_err() || from == self.me {
                    out.push(CyclonOutput::Invalid { from });
                } else {
                    match msg {
                        CyclonMsg::ShuffleRequest { entries } => {
                            self.on_request(from, entries, out)
                        }
                        CyclonMsg::ShuffleReply { entries } => self.on_reply(from, entries),
                    }
                }
            }
        }
        self.refresh_ids();
    }

    fn fire_timers(&mut self, now: Duration, out: &mut Vec<CyclonOutput<I>>) {
        if let Some(p) = &self.pending
            && p.deadline <= now
        {
            // The target was removed when the shuffle started; leaving it out is the removal.
            let p = self.pending.take().expect("checked");
            out.push(CyclonOutput::ShuffleTimedOut { peer: p.target });
        }
        if let Some(at) = self.next_shuffle
            && at <= now
        {
            // Catch up without bursting: one shuffle per call, the next one a period from now.
            self.next_shuffle = Some(now.max(at) + self.cfg.period);
            self.shuffle(now, out);
        }
    }

    fn shuffle(&mut self, now: Duration, out: &mut Vec<CyclonOutput<I>>) {
        if let Some(p) = self.pending.take() {
            // Still no answer one period later: treat as failed (the target is already out of the view).
            out.push(CyclonOutput::ShuffleTimedOut { peer: p.target });
        }
        for e in &mut self.view {
            e.age = (e.age + 1).min(MAX_AGE);
        }
        if self.view.is_empty() {
            self.rejoin();
            if self.view.is_empty() {
                return;
            }
        }
        // Oldest entry is the target (ties broken by position, which is itself random after merges).
        let oldest = (0..self.view.len())
            .max_by_key(|&i| (self.view[i].age, usize::MAX - i))
            .expect("non-empty");
        let target = self.remove_at(oldest).id;
        let mut idx: Vec<usize> = (0..self.view.len()).collect();
        idx.shuffle(&mut self.rng);
        idx.truncate(self.cfg.shuffle_len - 1);
        let mut entries: Vec<ViewEntry<I>> = idx.iter().map(|&i| self.view[i].clone()).collect();
        let sent: Vec<I> = entries.iter().map(|e| e.id.clone()).collect();
        entries.push(ViewEntry {
            id: self.me.clone(),
            age: 0,
        });
        self.pending = Some(Pending {
            target: target.clone(),
            sent,
            deadline: now + self.cfg.shuffle_timeout,
        });
        out.push(CyclonOutput::Send {
            to: target,
            msg: CyclonMsg::ShuffleRequest { entries },
        });
    }

    fn on_request(&mut self, from: I, entries: Vec<ViewEntry<I>>, out: &mut Vec<CyclonOutput<I>>) {
        let mut idx: Vec<usize> = (0..self.view.len()).collect();
        idx.shuffle(&mut self.rng);
        idx.truncate(self.cfg.shuffle_len);
        let reply: Vec<ViewEntry<I>> = idx.iter().map(|&i| self.view[i].clone()).collect();
        let sent: Vec<I> = reply.iter().map(|e| e.id.clone()).collect();
        out.push(CyclonOutput::Send {
            to: from.clone(),
            msg: CyclonMsg::ShuffleReply { entries: reply },
        });
        self.merge(&from, entries, &sent);
    }

    fn on_reply(&mut self, from: I, entries: Vec<ViewEntry<I>>) {
        // Only the reply to our outstanding shuffle is merged; anything else (late, duplicate, unsolicited)
        // would let a peer push entries into our view at will.
        match &self.pending {
            Some(p) if p.target == from => {
                let p = self.pending.take().expect("checked");
                self.merge(&from, entries, &p.sent);
            }
            _ => {}
        }
    }

    /// Cyclon step 6/7: discard self and known entries, fill empty slots, then replace entries we sent; and
    /// never more than [`CyclonConfig::max_per_supplier`] entries in the view from `from`.
    fn merge(&mut self, from: &I, entries: Vec<ViewEntry<I>>, sent: &[I]) {
        let mut replaceable: Vec<I> = sent.to_vec();
        let mut held = self.supplied_by(from);
        for e in entries.into_iter().take(MAX_SHUFFLE_ENTRIES) {
            if e.id == self.me || self.contains(&e.id) {
                continue;
            }
            if held >= self.cfg.max_per_supplier() {
                break;
            }
            if self.view.len() < self.cfg.view_size {
                self.view.push(e);
                self.supplier.push(Some(from.clone()));
                held += 1;
                continue;
            }
            // Replace one of the entries we sent that is still in the view.
            while let Some(old) = replaceable.pop() {
                if let Some(pos) = self.view.iter().position(|v| v.id == old) {
                    if self.supplier[pos].as_ref() == Some(from) {
                        held -= 1;
                    }
                    self.view[pos] = e;
                    self.supplier[pos] = Some(from.clone());
                    held += 1;
                    break;
                }
            }
        }
    }

    /// How many entries of the view `peer`'s shuffles put there.
    fn supplied_by(&self, peer: &I) -> usize {
        self.supplier
            .iter()
            .filter(|s| s.as_ref() == Some(peer))
            .count()
    }

    /// Removes entry `i` (and its supplier) by swapping the last one in.
    fn remove_at(&mut self, i: usize) -> ViewEntry<I> {
        self.supplier.swap_remove(i);
        self.view.swap_remove(i)
    }

    /// A random peer of the view (for callers that need one outside the protocols here).
    pub fn random_peer(&mut self) -> Option<I> {
        self.view.choose(&mut self.rng).map(|e| e.id.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::derive_rng;

    #[test]
    fn a_restored_view_keeps_its_entries_and_ages_and_skips_what_it_must() {
        let cfg = CyclonConfig {
            view_size: 3,
            shuffle_len: 2,
            ..CyclonConfig::default()
        };
        let mut a = Cyclon::new(0u32, cfg.clone(), crate::derive_rng(1, 0)).unwrap();
        let saved = vec![
            ViewEntry { id: 5, age: 7 },
            ViewEntry { id: 0, age: 1 },
            ViewEntry { id: 5, age: 2 },
            ViewEntry {
                id: 6,
                age: u32::MAX,
            },
            ViewEntry { id: 7, age: 0 },
            ViewEntry { id: 8, age: 0 },
        ];
        a.restore(Duration::ZERO, saved);
        assert_eq!(
            a.entries(),
            &[
                ViewEntry { id: 5, age: 7 },
                ViewEntry {
                    id: 6,
                    age: MAX_AGE
                },
                ViewEntry { id: 7, age: 0 },
            ],
            "itself and repeats skipped, ages capped, at most c kept"
        );
        a.check_invariants().unwrap();
        assert!(a.next_timeout().is_some(), "shuffling started");
        // The round trip: a snapshot restored into a fresh instance is the same view.
        let mut b = Cyclon::new(0u32, cfg, crate::derive_rng(1, 1)).unwrap();
        b.restore(Duration::ZERO, a.entries().to_vec());
        assert_eq!(b.entries(), a.entries());
    }

    #[test]
    fn an_emptied_view_starts_again_from_the_bootstrap_peers() {
        let cfg = CyclonConfig {
            view_size: 4,
            shuffle_len: 2,
            ..CyclonConfig::default()
        };
        let mut c = Cyclon::new(0u32, cfg.clone(), derive_rng(1, 0)).unwrap();
        let boot = [1u32, 2, 3, 0, 2, 4, 5, 6];
        c.join(Duration::ZERO, boot);
        let mut out = Vec::new();
        // Every send fails: the view empties (each failed send removes its peer).
        for p in [1u32, 2, 3, 4] {
            c.handle(Duration::ZERO, CyclonInput::SendFailed { to: p }, &mut out);
        }
        assert!(c.entries().is_empty());
        // The next shuffle takes shuffle_len bootstrap peers back and shuffles with one of them.
        out.clear();
        let at = c.next_timeout().unwrap();
        c.handle(at, CyclonInput::Tick, &mut out);
        c.check_invariants().unwrap();
        let sent: Vec<u32> = out
            .iter()
            .filter_map(|o| match o {
                CyclonOutput::Send { to, .. } => Some(*to),
                _ => None,
            })
            .collect();
        assert_eq!(sent.len(), 1, "{out:?}");
        // One of the two taken back is the target (removed while its shuffle is pending), the other stays.
        assert_eq!(c.entries().len(), cfg.shuffle_len - 1);
        let back: Vec<u32> = c.peers().into_iter().chain(sent).collect();
        assert!(
            back.iter().all(|p| [1, 2, 3, 4, 5, 6].contains(p)),
            "{back:?}"
        );
        assert_ne!(back[0], back[1]);
        // Without bootstrap peers an emptied view stays empty and nothing is sent.
        let mut lone = Cyclon::new(0u32, cfg, derive_rng(1, 1)).unwrap();
        lone.join(Duration::ZERO, [0u32]);
        out.clear();
        let at = lone.next_timeout().unwrap();
        lone.handle(at, CyclonInput::Tick, &mut out);
        assert!(out.is_empty() && lone.entries().is_empty());
    }

    #[test]
    fn check_invariants_reports_broken_state() {
        let mut c = Cyclon::new(0u32, CyclonConfig::default(), derive_rng(1, 1)).unwrap();
        c.join(Duration::ZERO, [1, 2, 3]);
        assert!(c.check_invariants().is_ok());
        c.view.push(ViewEntry { id: 2, age: 0 });
        c.supplier.push(None);
        assert!(c.check_invariants().unwrap_err().contains("twice"));
        c.view.pop();
        c.view.push(ViewEntry { id: 0, age: 0 });
        assert!(c.check_invariants().unwrap_err().contains("itself"));
        c.view.pop();
        assert!(c.check_invariants().unwrap_err().contains("suppliers"));
        c.supplier.pop();
        assert!(c.check_invariants().is_ok());
        // The ids the overlay reads must follow the view.
        c.view.swap(0, 1);
        assert!(c.check_invariants().unwrap_err().contains("out of step"));
        c.refresh_ids();
        assert!(c.check_invariants().is_ok());
        assert_eq!(c.peer_ids(), c.peers().as_slice());
    }
}
