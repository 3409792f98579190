//! Round speed in the reference implementation's own MovieLens setting, and the limits beside it.
//!
//! `cargo bench -p testnet --bench rounds` (add `-- --rounds 11` for a quick look, `-- --help` for options).
//!
//! 1. The setting of the reference's MovieLens experiment — matrix factorisation (d = 206,680), 8 RNs, r = 4,
//!    lr 0.075, batch 32, one local epoch per round — run with `testnet --mode inproc` (real libp2p on
//!    127.0.0.1 TCP) for k = 1, 2, 4: round time (mean, and without round 0, which waits for whatever of its
//!    overlay the warm-up did not negotiate), training time, protocol overhead (round − training) and the
//!    part of it that waited for the round's overlay to freeze (`ovl wait`), neighbours per VN, chunk bytes
//!    against 4·d·r, messages, final RMSE, cores busy (the process's CPU seconds over wall seconds after every
//!    node's first round: near the machine's core count, the rounds wait on the cores), the run's wall time
//!    with its start-up (round 0's overlay is negotiated in the warm-up, so this is where that time shows) —
//!    next to the figures the issue quotes for the Python reference.
//! 2. Limits measured in the same run: one chunk of MovieLens at k = 2 (413 KB) sent request/acknowledge
//!    over raw loopback TCP vs over our libp2p chunk path (noise + yamux + the chunk links' long-lived
//!    stream; and, for comparison, as request-response requests, as chunks went before), and the
//!    authenticated encryption alone (noise's ChaCha20-Poly1305 from `ring`, sealed and opened in noise-sized
//!    frames, as both ends of the path do) with the bound it puts on the path's ratio where one core does a
//!    chunk's sealing, transfer and opening in turn; the same frames sent as sealed records straight on a
//!    loopback TCP socket, with noise's cipher and with AES-256-GCM (what a path with that cipher and no
//!    libp2p between the socket and the cipher reaches, the two ends overlapped on two cores), all of them
//!    in alternating batches (the rates are medians over the batches, the ratios the median and range of the
//!    batches' own, so that a phase of the host moves a path and raw TCP alike); one round's
//!    aggregation at k = 2, r = 4 (this setting) and k = 8, r = 8 (the paper's default) vs memcpy of the
//!    same received bytes (alternating batches of each, the median rate of 9).
//!
//! A benchmark binary, not a timed test: the figures depend on the machine and its load.

// Wall-clock measurement is what this file is for; no engine reads it.
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use libp2p::futures::StreamExt;
use libp2p::identity::Keypair;
use libp2p::request_response::{Event, Message};
use libp2p::swarm::SwarmEvent;
use models::aggregate::Aggregator;
use models::chunking::ChunkPartition;
use node::engine::RoundMetrics;
use node::net::behaviour::{Timeouts, VnBehaviourEvent};
use node::net::chunk_link::{ChunkEvent, ChunkLinks};
use node::net::transport::VnSwarm;
use testnet::cli::{Mode, Options};
use testnet::scenario::Settings;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The Python reference on a 2-core machine with a central peer sampler (issue "Rounds at the speed of
/// training"): 0.48 s per round, 0.36 s of it training; our figures before this benchmark existed:
/// 2.605 / 2.619 / 2.621 s per round at k = 1 / 2 / 4.
const REFERENCE_ROUND_SECS: f64 = 0.48;
const REFERENCE_TRAIN_SECS: f64 = 0.36;
const BEFORE_ROUND_SECS: [(usize, f64); 3] = [(1, 2.605), (2, 2.619), (4, 2.621)];

/// MovieLens matrix factorisation, 20 factors on ml-latest-small.
const MOVIELENS_LAYOUT: [usize; 2] = [610 * 20, 9724 * 20];

/// Alternating batches of the limits' transfers (see `main`).
const LIMIT_BATCHES: usize = 5;

/// The limits' transfer paths, as indices into their batches' rates.
const RAW: usize = 0;
const P2P: usize = 1;
const REQUESTS: usize = 2;
const AEAD: usize = 3;
const SEALED_NOISE: usize = 4;
const SEALED_AES: usize = 5;

#[derive(Parser, Debug)]
#[command(about = "Round speed in the reference's MovieLens setting, and the limits beside it")]
struct Args {
    /// Rounds per setting (the issue's figures are after round 51).
    #[arg(long, default_value_t = 51)]
    rounds: u64,
    /// Virtual nodes per RN to run.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    vns: Vec<usize>,
    /// MovieLens directory. [default: ../shared/data/movielens/ml-latest-small beside the repository; `cargo
    /// bench` runs in testnet/]
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Chunks sent per transport in the limits part, over all its batches.
    #[arg(long, default_value_t = 400)]
    chunks: usize,
    /// Values per chunk in the limits part (default: MovieLens at k = 2, d / 2). A small chunk shows what a
    /// request costs whatever its size: `--limits-only --chunk-values 1000`.
    #[arg(long)]
    chunk_values: Option<usize>,
    /// Skip the rounds part (limits only).
    #[arg(long)]
    limits_only: bool,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() -> anyhow::Result<()> {
    // As the binaries do: Candle's matmul thread count fixed for the process (`models::threads`).
    if let Err(e) = models::threads::reexec_with_matmul_threads() {
        eprintln!(
            "could not restart with RAYON_NUM_THREADS set ({e}): matmuls read /proc/cpuinfo each time"
        );
    }
    let a = Args::parse();
    let d: usize = MOVIELENS_LAYOUT.iter().sum();
    let chunk_values = a.chunk_values.unwrap_or(d / 2);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let frame = protocol::ChunkFrame {
        round: protocol::Round(0),
        chunk: protocol::ChunkIndex(0),
        values: vec![0.25; chunk_values],
    }
    .encode();
    // The transfers alternate in batches (raw TCP, the chunk path, requests, the cipher alone, sealed
    // records), so that a phase of the host moves every path of a batch alike; each rate is the median over
    // the batches, and each ratio to raw TCP the median of the batches' own ratios.
    let per_batch = a.chunks.div_ceil(LIMIT_BATCHES).max(1);
    let mut rates: [Vec<f64>; 6] = Default::default();
    for _ in 0..LIMIT_BATCHES {
        rates[RAW].push(rt.block_on(raw_tcp(&frame, per_batch))?);
        rates[P2P].push(rt.block_on(libp2p_chunks(&frame, per_batch))?);
        rates[REQUESTS].push(rt.block_on(libp2p_chunk_requests(&frame, per_batch))?);
        rates[AEAD].push(seal_and_open(&frame, per_batch));
        rates[SEALED_NOISE].push(rt.block_on(sealed_records(
            &frame,
            per_batch,
            &ring::aead::CHACHA20_POLY1305,
        ))?);
        rates[SEALED_AES].push(rt.block_on(sealed_records(
            &frame,
            per_batch,
            &ring::aead::AES_256_GCM,
        ))?);
    }
    let aggregation = [(2, 4), (8, 8)].map(|(k, r)| (k, r, aggregation_vs_memcpy(k, r)));
    drop(rt);

    let data_dir = a.data_dir.clone().unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/data/movielens/ml-latest-small")
    });
    let mut rows = Vec::new();
    if !a.limits_only {
        if !data_dir.join("ratings.csv").exists() {
            bail!(
                "MovieLens not found at {} (pass --data-dir)",
                data_dir.display()
            );
        }
        let out = std::env::temp_dir().join(format!("shatter-bench-rounds-{}", std::process::id()));
        let opts = Options {
            mode: Some(Mode::Inproc),
            nodes: Some(8),
            vns: Some(a.vns.clone()),
            degree: Some(4),
            rounds: Some(a.rounds),
            dataset: Some(testnet::cli::DatasetName::Movielens),
            data_dir: Some(data_dir),
            out: Some(out.clone()),
            ..Options::default()
        };
        let settings = Settings::from_options(opts)?;
        eprintln!("{}", testnet::describe(&settings));
        let report = testnet::run(&settings)?;
        if report.failed {
            bail!("some nodes failed: see {}/summary.json", out.display());
        }
        let lines = std::fs::read_to_string(out.join("metrics.jsonl"))
            .context("reading the run's metrics")?;
        for s in &report.summaries {
            let ms: Vec<RoundMetrics> = lines
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter(|v| v["vns"] == s.vns)
                .filter_map(|v| serde_json::from_value(v).ok())
                .collect();
            rows.push(Row::new(s, &ms));
        }
        let _ = std::fs::remove_dir_all(&out);
    }

    println!();
    if !rows.is_empty() {
        println!(
            "MovieLens MF (d = {d}), 8 RNs, r = 4, lr 0.075, batch 32, 1 epoch/round, {} rounds, inproc TCP",
            a.rounds
        );
        println!(
            "{:<4} {:>9} {:>12} {:>9} {:>9} {:>9} {:>10} {:>11} {:>10} {:>9} {:>8} {:>6} {:>7} {:>9}",
            "k",
            "round s",
            "w/o round0",
            "train s",
            "overhead",
            "ovl wait",
            "nbrs/VN",
            "chunk B/RN",
            "÷ 4·d·r",
            "msgs/RN",
            "RMSE",
            "cores",
            "wall s",
            "before s"
        );
        for r in &rows {
            let before = BEFORE_ROUND_SECS
                .iter()
                .find(|(k, _)| *k == r.k)
                .map_or("-".to_string(), |(_, s)| format!("{s:.3}"));
            println!(
                "{:<4} {:>9.3} {:>12.3} {:>9.4} {:>9.3} {:>9.3} {:>10.3} {:>11.0} {:>10.3} {:>9.0} {:>8.4} {:>6} {:>7.1} {:>9}",
                r.k,
                r.round,
                r.round_after_first,
                r.train,
                r.round - r.train,
                r.overlay_wait,
                r.neighbours,
                r.chunk_bytes,
                r.chunk_bytes / (4.0 * d as f64 * 4.0),
                r.messages,
                r.rmse,
                r.cores_busy.map_or("-".to_string(), |c| format!("{c:.2}")),
                r.wall,
                before
            );
        }
        println!(
            "Python reference (central peer sampler, same machine class): {REFERENCE_ROUND_SECS} s per round, \
             {REFERENCE_TRAIN_SECS} s of it training"
        );
        println!();
    }
    let mb = |bytes_per_s: f64| bytes_per_s / 1e6;
    println!(
        "Limits: {} chunks of {} B each way in {LIMIT_BATCHES} alternating batches, request then \
         acknowledgement; rates are medians over the batches, ratios the median (and range) of the batches' own",
        per_batch * LIMIT_BATCHES,
        frame.len()
    );
    let rate = |path: usize| median(rates[path].clone());
    // The batch-by-batch ratio of a path to raw TCP: median, smallest, largest.
    let to_raw = |path: usize| {
        let mut v: Vec<f64> = rates[path]
            .iter()
            .zip(&rates[RAW])
            .map(|(p, r)| p / r)
            .collect();
        v.sort_by(f64::total_cmp);
        format!(
            "{:.2}× raw, {:.2}–{:.2}",
            v[v.len() / 2],
            v[0],
            v[v.len() - 1]
        )
    };
    println!("  raw loopback TCP           {:>8.1} MB/s", mb(rate(RAW)));
    println!(
        "  libp2p chunk path          {:>8.1} MB/s  ({}; chunk streams)",
        mb(rate(P2P)),
        to_raw(P2P)
    );
    println!(
        "  … as requests (before)     {:>8.1} MB/s  ({}; a request-response stream per chunk)",
        mb(rate(REQUESTS)),
        to_raw(REQUESTS)
    );
    // A bound on an encrypted path's ratio, for one chunk at a time, where one core does all the work of a
    // chunk (as in a round, where both cores are busy): its raw transfer plus its sealing and opening. With
    // the sender sealing on one core while the receiver opens on the other, arithmetic alone would allow
    // twice the seal + open rate; the sealed records below measure what that overlap reaches in practice.
    let one_core = 1.0 / (1.0 + rate(RAW) / rate(AEAD));
    println!(
        "  encryption alone           {:>8.1} MB/s  (seal + open on one core; bounds an encrypted path at \
         {one_core:.2}× raw where one core seals, sends and opens a chunk in turn)",
        mb(rate(AEAD)),
    );
    println!(
        "  sealed records on raw TCP  {:>8.1} MB/s  ({}; ChaCha20-Poly1305, noise's cipher, in 64 KiB \
         records straight on the socket: noise's cipher with nothing else on the path)",
        mb(rate(SEALED_NOISE)),
        to_raw(SEALED_NOISE)
    );
    println!(
        "  … with AES-256-GCM         {:>8.1} MB/s  ({}; the same records: what a chunk transport beneath \
         libp2p with AES could reach)",
        mb(rate(SEALED_AES)),
        to_raw(SEALED_AES)
    );
    for (k, r, (agg, memcpy)) in aggregation {
        println!(
            "  aggregation k={k}, r={r}       {:>8.1} MB/s  ({:.2}× memcpy at {:.1} MB/s)",
            mb(agg),
            agg / memcpy,
            mb(memcpy)
        );
    }
    Ok(())
}

/// One k's figures, means over every RN and round.
struct Row {
    k: usize,
    round: f64,
    round_after_first: f64,
    train: f64,
    /// Of the round, the wait for its overlay to freeze (`RoundMetrics::overlay_wait_secs`): what of the
    /// overhead is negotiation rather than the exchange itself.
    overlay_wait: f64,
    neighbours: f64,
    chunk_bytes: f64,
    messages: f64,
    rmse: f64,
    /// The run's CPU seconds over its wall seconds after every node's first round (`testnet::cpu`), where
    /// Linux tells.
    cores_busy: Option<f64>,
    /// The whole run's wall seconds, its start-up (warm-up included) with it: what moves into the warm-up
    /// leaves the mean round but not this.
    wall: f64,
}

impl Row {
    fn new(s: &testnet::report::Summary, ms: &[RoundMetrics]) -> Row {
        let mean = |f: &dyn Fn(&RoundMetrics) -> f64, pick: &dyn Fn(&RoundMetrics) -> bool| {
            let v: Vec<f64> = ms.iter().filter(|m| pick(m)).map(f).collect();
            v.iter().sum::<f64>() / v.len().max(1) as f64
        };
        let all = |_: &RoundMetrics| true;
        Row {
            k: s.vns,
            round: s.mean_round_seconds,
            round_after_first: mean(&|m| m.round_secs, &|m| m.round.get() > 0),
            train: s.mean_train_seconds,
            overlay_wait: s.mean_overlay_wait_seconds,
            neighbours: mean(&|m| m.neighbours as f64, &all) / s.vns as f64,
            chunk_bytes: s.chunk_bytes_per_rn_per_round,
            messages: s.messages_per_rn_per_round,
            rmse: s.final_metric,
            cores_busy: s
                .extra
                .get("cores_busy_after_round0")
                .and_then(|v| v.as_f64()),
            wall: s.wall_seconds,
        }
    }
}

/// Bytes per second of `n` frames sent over one loopback TCP connection, each answered by a 2-byte
/// acknowledgement before the next (the chunk protocol's request/response pattern, without libp2p).
async fn raw_tcp(frame: &[u8], n: usize) -> anyhow::Result<f64> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let len = frame.len();
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await?;
        s.set_nodelay(true)?;
        let mut buf = vec![0u8; len];
        for _ in 0..n {
            let mut prefix = [0u8; 4];
            s.read_exact(&mut prefix).await?;
            s.read_exact(&mut buf).await?;
            s.write_all(&[0, 0]).await?;
        }
        anyhow::Ok(())
    });
    let mut c = tokio::net::TcpStream::connect(addr).await?;
    c.set_nodelay(true)?;
    let t = Instant::now();
    for _ in 0..n {
        c.write_all(&(len as u32).to_le_bytes()).await?;
        c.write_all(frame).await?;
        let mut ack = [0u8; 2];
        c.read_exact(&mut ack).await?;
    }
    let secs = t.elapsed().as_secs_f64();
    server.await??;
    Ok((n * len) as f64 / secs)
}

/// Plaintext per sealed record in [`sealed_records`]: 64 KiB, about noise's largest message
/// ([`NOISE_PLAINTEXT`] bytes of plaintext).
const RECORD: usize = 64 * 1024;

/// Bytes per second of `n` frames sent over one loopback TCP connection as records sealed with `cipher`
/// (`ring`): each frame cut into records of [`RECORD`] bytes, each record copied out, sealed in place and
/// written with its length, then opened in place at the receiver and copied into the frame; each frame
/// answered by a 2-byte acknowledgement before the next. No libp2p, no multiplexer, no tasks between the
/// socket and the cipher: about the best a chunk transport beneath libp2p with this cipher could do, with
/// sealing and opening overlapped on the two ends' cores as noise's frames are.
async fn sealed_records(
    frame: &[u8],
    n: usize,
    cipher: &'static ring::aead::Algorithm,
) -> anyhow::Result<f64> {
    use ring::aead::{Aad, LessSafeKey, MAX_TAG_LEN, Nonce, UnboundKey};
    // A fixed key is fine for a measurement; a counter nonce per record, as noise's.
    let key = || LessSafeKey::new(UnboundKey::new(cipher, &[7u8; 32]).expect("a 32-byte key"));
    let nonce = |c: u64| {
        let mut b = [0u8; 12];
        b[4..].copy_from_slice(&c.to_le_bytes());
        Nonce::assume_unique_for_key(b)
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let len = frame.len();
    let server = tokio::spawn(async move {
        let key = key();
        let (mut s, _) = listener.accept().await?;
        s.set_nodelay(true)?;
        let mut received = vec![0u8; len];
        let mut record = vec![0u8; RECORD + MAX_TAG_LEN];
        let mut counter = 0u64;
        for _ in 0..n {
            let mut filled = 0;
            while filled < len {
                let mut prefix = [0u8; 4];
                s.read_exact(&mut prefix).await?;
                // Checked before it is used: the listener would take any local connection, not only ours.
                let sealed_len = u32::from_le_bytes(prefix) as usize;
                if sealed_len > record.len() {
                    bail!(
                        "a sealed record of {sealed_len} bytes, over the {}",
                        record.len()
                    );
                }
                let sealed = &mut record[..sealed_len];
                s.read_exact(sealed).await?;
                let plain = key
                    .open_in_place(nonce(counter), Aad::empty(), sealed)
                    .map_err(|_| anyhow::anyhow!("a record failed to open"))?;
                counter += 1;
                received[filled..filled + plain.len()].copy_from_slice(plain);
                filled += plain.len();
            }
            black_box(&received);
            s.write_all(&[0, 0]).await?;
        }
        anyhow::Ok(())
    });
    let key = key();
    let mut c = tokio::net::TcpStream::connect(addr).await?;
    c.set_nodelay(true)?;
    let mut record = Vec::with_capacity(4 + RECORD + MAX_TAG_LEN);
    let mut counter = 0u64;
    let t = Instant::now();
    for _ in 0..n {
        for part in frame.chunks(RECORD) {
            record.clear();
            record.extend_from_slice(&((part.len() + MAX_TAG_LEN) as u32).to_le_bytes());
            record.extend_from_slice(part);
            let tag = key
                .seal_in_place_separate_tag(nonce(counter), Aad::empty(), &mut record[4..])
                .map_err(|_| anyhow::anyhow!("a record failed to seal"))?;
            record.extend_from_slice(tag.as_ref());
            counter += 1;
            c.write_all(&record).await?;
        }
        let mut ack = [0u8; 2];
        c.read_exact(&mut ack).await?;
    }
    let secs = t.elapsed().as_secs_f64();
    server.await??;
    Ok((n * len) as f64 / secs)
}

/// Largest plaintext in one noise transport message (65,535 bytes with its 16-byte tag).
const NOISE_PLAINTEXT: usize = 65_535 - 16;

/// Bytes per second of `n` frames sealed and opened with ChaCha20-Poly1305 (`ring`, the implementation the
/// noise handshake's cipher resolves to here) in noise-sized messages: the authenticated encryption both ends
/// of the chunk path do, without the network.
fn seal_and_open(frame: &[u8], n: usize) -> f64 {
    use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};
    let key =
        LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, &[7u8; 32]).expect("a 32-byte key"));
    let mut buf = Vec::with_capacity(NOISE_PLAINTEXT + 16);
    let mut counter = 0u64;
    let nonce = |c: u64| {
        let mut b = [0u8; 12];
        b[4..].copy_from_slice(&c.to_le_bytes());
        Nonce::assume_unique_for_key(b)
    };
    let t = Instant::now();
    for _ in 0..n {
        for part in frame.chunks(NOISE_PLAINTEXT) {
            buf.clear();
            buf.extend_from_slice(part);
            key.seal_in_place_append_tag(nonce(counter), Aad::empty(), &mut buf)
                .expect("seal");
            let opened = key
                .open_in_place(nonce(counter), Aad::empty(), &mut buf)
                .expect("open");
            black_box(opened);
            counter += 1;
        }
    }
    (n * frame.len()) as f64 / t.elapsed().as_secs_f64()
}

/// Two VN Swarms with fresh identities, each on the other's allow-list, refusing chunk frames over `max`
/// bytes: (a, b, a's id, b's id).
fn allowed_pair(max: usize) -> anyhow::Result<(VnSwarm, VnSwarm, libp2p::PeerId, libp2p::PeerId)> {
    let (ka, kb) = (Keypair::generate_ed25519(), Keypair::generate_ed25519());
    let (pa, pb) = (ka.public().to_peer_id(), kb.public().to_peer_id());
    let mut a = node::net::transport::build_swarm(ka, None, Timeouts::default(), max)?;
    let mut b = node::net::transport::build_swarm(kb, None, Timeouts::default(), max)?;
    a.behaviour_mut().allow.allow_peer(pb);
    b.behaviour_mut().allow.allow_peer(pa);
    Ok((a, b, pa, pb))
}

/// Bytes per second of `n` chunk frames sent between two VN Swarms over 127.0.0.1 TCP through the node's own
/// path (noise, yamux, the chunk links' long-lived stream: `node::net::chunk_link`), one at a time, each
/// answered before the next.
async fn libp2p_chunks(frame: &[u8], n: usize) -> anyhow::Result<f64> {
    let max = frame.len();
    let (mut a, mut b, pa, pb) = allowed_pair(max)?;
    let links = |swarm: &VnSwarm, peer: libp2p::PeerId| {
        let list = node::peers::PeerList::from_entries([(peer, None)]);
        ChunkLinks::new(
            swarm.behaviour().chunk_stream.new_control(),
            Arc::new(list),
            max,
            Duration::from_secs(10),
            Duration::from_secs(120),
        )
    };
    let (mut la, mut lb) = (links(&a, pb)?, links(&b, pa)?);
    la.start();
    lb.start();
    b.listen_on("/ip4/127.0.0.1/tcp/0".parse()?)?;
    let addr = loop {
        if let SwarmEvent::NewListenAddr { address, .. } = b.select_next_some().await {
            break address;
        }
    };
    // The Swarms run on their own; the links talk to them through their stream controls.
    let drive_b = tokio::spawn(async move {
        loop {
            b.select_next_some().await;
        }
    });
    a.dial(addr)?;
    loop {
        if let SwarmEvent::ConnectionEstablished { .. } = a.select_next_some().await {
            break;
        }
    }
    let drive_a = tokio::spawn(async move {
        loop {
            a.select_next_some().await;
        }
    });
    let receiver = tokio::spawn(async move {
        loop {
            if let ChunkEvent::Chunk { reply, .. } = lb.next().await {
                let _ = reply.send(vec![0]);
            }
        }
    });
    let frame = Arc::new(frame.to_vec());
    // The first chunk (stream opening, protocol negotiation) is not timed.
    let mut t = None;
    for i in 0..=n {
        if i == 1 {
            t = Some(Instant::now());
        }
        la.send(pb, protocol::Round(i as u64), frame.clone(), false);
        loop {
            match la.next().await {
                ChunkEvent::Reply { .. } => break,
                ChunkEvent::Failed { .. } => bail!("chunk {i} not delivered"),
                _ => {}
            }
        }
    }
    let secs = t.expect("n ≥ 1").elapsed().as_secs_f64();
    receiver.abort();
    drive_a.abort();
    drive_b.abort();
    Ok((n * frame.len()) as f64 / secs)
}

/// Bytes per second of `n` chunk frames sent between two VN Swarms over 127.0.0.1 TCP as request-response
/// requests (noise, yamux, the request-response chunk codec: how VNs sent chunks before the chunk links), one
/// at a time.
async fn libp2p_chunk_requests(frame: &[u8], n: usize) -> anyhow::Result<f64> {
    let max = frame.len();
    let (mut a, mut b, _, pb) = allowed_pair(max)?;
    b.listen_on("/ip4/127.0.0.1/tcp/0".parse()?)?;
    let addr = loop {
        if let SwarmEvent::NewListenAddr { address, .. } = b.select_next_some().await {
            break address;
        }
    };
    let receiver = tokio::spawn(async move {
        // n timed requests and one untimed first one.
        let mut answered = 0;
        while answered <= n {
            if let SwarmEvent::Behaviour(VnBehaviourEvent::Chunk(Event::Message {
                message: Message::Request { channel, .. },
                ..
            })) = b.select_next_some().await
            {
                let _ = b.behaviour_mut().chunk.send_response(channel, vec![0, 0]);
                answered += 1;
            }
        }
        // Keep driving the swarm briefly so the last response leaves.
        let _ = tokio::time::timeout(Duration::from_millis(200), async {
            loop {
                b.select_next_some().await;
            }
        })
        .await;
    });
    a.dial(addr.clone())?;
    // The node's path: one shared encoding, handed to libp2p once per request without a copy.
    let frame = std::sync::Arc::new(frame.to_vec());
    // The first request (connection set-up, protocol negotiation) is not timed.
    let mut t = None;
    for i in 0..=n {
        if i == 1 {
            t = Some(Instant::now());
        }
        a.behaviour_mut()
            .chunk
            .send_request_with_addresses(&pb, frame.clone(), vec![addr.clone()]);
        loop {
            match a.select_next_some().await {
                SwarmEvent::Behaviour(VnBehaviourEvent::Chunk(Event::Message {
                    message: Message::Response { .. },
                    ..
                })) => break,
                SwarmEvent::Behaviour(VnBehaviourEvent::Chunk(Event::OutboundFailure {
                    error,
                    ..
                })) => bail!("chunk request failed: {error}"),
                _ => {}
            }
        }
    }
    let secs = t.expect("n ≥ 1").elapsed().as_secs_f64();
    receiver.abort();
    Ok((n * frame.len()) as f64 / secs)
}

/// Alternating batches of aggregation and memcpy in [`aggregation_vs_memcpy`].
const TRIALS: usize = 9;

/// The middle value (of an odd count).
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Bytes per second of one round's aggregation (extract the k local chunks, add k·r received copies, write
/// the per-parameter means back) against memcpy of the same received bytes, for MovieLens MF.
fn aggregation_vs_memcpy(k: usize, r: usize) -> (f64, f64) {
    let part = Arc::new(ChunkPartition::new(&MOVIELENS_LAYOUT, k, 7).expect("partition"));
    let d = part.d();
    let values = |salt: usize| -> Vec<f32> {
        (0..d)
            .map(|i| ((i.wrapping_mul(2_654_435_761) ^ salt) % 1000) as f32 * 1e-3 - 0.5)
            .collect()
    };
    let local = values(0);
    let received: Vec<Vec<Vec<f32>>> = (0..r)
        .map(|c| {
            let other = values(c + 1);
            (0..k)
                .map(|s| part.extract(s, &other).expect("extract"))
                .collect()
        })
        .collect();
    let bytes = (r * d * 4) as f64;
    let reps = 100;
    let mut agg = Aggregator::new(part.clone());
    let (mut cut, mut params) = (Vec::new(), local.clone());
    // One flat copy of all received bytes (as `cargo bench -p models --bench chunking` does): the same
    // amount of memory traffic, not a cache-hot copy into one model-sized buffer.
    let src = vec![1f32; r * d];
    let mut dst = vec![0f32; r * d];
    // Batches of the two alternate, and each rate is the median over the batches: a moment of host noise
    // then moves neither, and both see the same cache and clock state.
    let (mut agg_rates, mut memcpy_rates) = (Vec::new(), Vec::new());
    for _ in 0..TRIALS {
        let t = Instant::now();
        for _ in 0..reps {
            part.extract_all_into(black_box(&local), &mut cut)
                .expect("extract");
            agg.reset();
            for copies in &received {
                for (s, chunk) in copies.iter().enumerate() {
                    agg.add(s, black_box(chunk)).expect("add");
                }
            }
            agg.finish_into(&mut params).expect("finish");
            black_box(&params);
        }
        agg_rates.push(bytes * reps as f64 / t.elapsed().as_secs_f64());
        let t = Instant::now();
        for _ in 0..reps {
            dst.copy_from_slice(black_box(&src));
            black_box(&dst);
        }
        memcpy_rates.push(bytes * reps as f64 / t.elapsed().as_secs_f64());
    }
    let (agg_rate, memcpy_rate) = (median(agg_rates), median(memcpy_rates));
    (agg_rate, memcpy_rate)
}
