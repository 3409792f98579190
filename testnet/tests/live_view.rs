//! `--ui`: a small in-process testnet (a k = 1, 2 sweep on 127.0.0.1) serves its live view; the event stream
//! delivers every node's every round, the overlays and the end, the page is self-contained, and the
//! testnet's `/metrics` (the nodes' Prometheus metrics) moves with the rounds. `testnet view DIR` replays the
//! same rounds from the run's files. Bounded: a few seconds of rounds, a 180 s limit.

// Wall-clock limits on a run in another thread; no engine reads them.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use testnet::cli::{Mode, Options};
use testnet::scenario::Settings;

const NODES: usize = 3;
const ROUNDS: u64 = 4;
const KS: [usize; 2] = [1, 2];

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// A response to `GET path`, the connection's body still streaming.
async fn get(addr: SocketAddr, path: &str) -> Option<hyper::Response<hyper::body::Incoming>> {
    let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(conn);
    let req = hyper::Request::get(path)
        .header(hyper::header::HOST, addr.to_string())
        .body(http_body_util::Empty::<hyper::body::Bytes>::new())
        .unwrap();
    send.send_request(req).await.ok()
}

async fn text(addr: SocketAddr, path: &str) -> String {
    let res = get(addr, path).await.expect("the server answers");
    assert_eq!(res.status(), 200, "{path}");
    let body = res.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(body.to_vec()).unwrap()
}

/// `shatter_rounds_total` of each (k, node) in an OpenMetrics text.
fn rounds_total(metrics: &str) -> BTreeMap<String, f64> {
    metrics
        .lines()
        .filter(|l| l.starts_with("shatter_rounds_total{"))
        .map(|l| {
            let (series, v) = l.rsplit_once(' ').unwrap();
            (series.to_string(), v.parse().unwrap())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_view_streams_every_round_and_the_testnets_metrics_move() {
    let out = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let options = Options {
        mode: Some(Mode::Inproc),
        nodes: Some(NODES),
        vns: Some(KS.to_vec()),
        degree: Some(2),
        rounds: Some(ROUNDS),
        model: Some("mlp:16".parse().unwrap()),
        local_steps: Some(5),
        test_samples: Some(200),
        out: Some(out.path().to_path_buf()),
        plain: true,
        ui: Some(addr),
        ..Default::default()
    };
    let settings = Settings::resolve(options).unwrap();
    let run = std::thread::spawn(move || testnet::run(&settings).map(|r| r.failed));

    // The stream, from the start (the server binds before the run loads its data).
    let start = Instant::now();
    let limit = Duration::from_secs(180);
    let res = loop {
        if let Some(r) = get(addr, "/events").await {
            break r;
        }
        assert!(start.elapsed() < limit, "the live view never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(res.status(), 200);
    let kind = res.headers()[hyper::header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_string();
    assert!(kind.starts_with("text/event-stream"), "{kind}");
    let mut body = res.into_body();
    let mut buf = String::new();
    let mut events: Vec<Value> = Vec::new();
    let mut first_scrape: Option<BTreeMap<String, f64>> = None;
    'stream: while start.elapsed() < limit {
        let frame = tokio::time::timeout(limit - start.elapsed(), body.frame())
            .await
            .expect("an event within the limit")
            .expect("the stream stays open")
            .unwrap();
        let Ok(data) = frame.into_data() else {
            continue;
        };
        buf.push_str(std::str::from_utf8(&data).unwrap());
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: ")) else {
                continue;
            };
            if block.lines().any(|l| l == "event: reset") {
                continue;
            }
            let ev: Value = serde_json::from_str(data).unwrap();
            // Scrape once the second setting's nodes are running and have finished a round.
            if first_scrape.is_none() && ev["type"] == "round" && ev["k"] == 2 {
                first_scrape = Some(rounds_total(&text(addr, "/metrics").await));
            }
            let end = ev["type"] == "finished";
            events.push(ev);
            if end {
                break 'stream;
            }
        }
    }
    assert!(!run.join().unwrap().unwrap(), "the run succeeded");
    assert_eq!(events.first().unwrap()["type"], "run");
    assert_eq!(
        events.last().unwrap()["type"],
        "finished",
        "the stream got to the end"
    );
    for k in KS {
        let mut seen: BTreeMap<(u64, u64), usize> = BTreeMap::new();
        for e in events
            .iter()
            .filter(|e| e["type"] == "round" && e["k"] == k)
        {
            *seen
                .entry((e["node"].as_u64().unwrap(), e["round"].as_u64().unwrap()))
                .or_default() += 1;
        }
        for node in 0..NODES as u64 {
            for round in 0..ROUNDS {
                assert_eq!(
                    seen.get(&(node, round)),
                    Some(&1),
                    "k = {k}: node {node}'s round {round} delivered once"
                );
            }
        }
        let overlays: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "overlay" && e["k"] == k)
            .collect();
        assert!(!overlays.is_empty(), "k = {k}: the overlay is drawn");
        for o in &overlays {
            assert_eq!(o["owner"].as_array().unwrap().len(), NODES * k);
            assert!(!o["edges"].as_array().unwrap().is_empty(), "{o}");
        }
        assert!(
            events
                .iter()
                .any(|e| e["type"] == "setting_done" && e["k"] == k),
            "k = {k} ended"
        );
    }

    // The testnet's /metrics: every node of every setting, and the second setting's moved on since the
    // first scrape.
    let last = rounds_total(&text(addr, "/metrics").await);
    for k in KS {
        for node in 0..NODES {
            let key = format!("shatter_rounds_total{{k=\"{k}\",node=\"{node}\"}}");
            assert_eq!(last.get(&key), Some(&(ROUNDS as f64)), "{key}: {last:?}");
        }
    }
    let first = first_scrape.expect("scraped during the run");
    let k2: f64 = first
        .iter()
        .filter(|(s, _)| s.contains("k=\"2\""))
        .map(|(_, v)| v)
        .sum();
    assert!(
        k2 < (NODES as u64 * ROUNDS) as f64,
        "the first scrape came during the second setting: {first:?}"
    );

    // The page: one self-contained file (nothing fetched from elsewhere) that follows the stream.
    let page = text(addr, "/").await;
    assert!(page.contains("new EventSource(\"events\")"));
    for external in ["http://", "https://", "//cdn", "<link "] {
        assert!(
            !page
                .replace("http://www.w3.org/2000/svg", "")
                .contains(external),
            "the page loads {external}"
        );
    }

    // `testnet view DIR`: the same rounds from the run's files.
    let replay = testnet::live::view::events_of_dir(out.path()).unwrap();
    let rounds = replay
        .iter()
        .filter(|e| matches!(e, testnet::live::LiveEvent::Round { .. }))
        .count();
    assert_eq!(rounds, KS.len() * NODES * ROUNDS as usize);
}
