//! `metrics_addr`: a `node run` process serves OpenMetrics text at `/metrics`, and what it serves moves
//! with the rounds. Two real node processes on 127.0.0.1; one serves metrics on a free port.

// Wall-clock polling of a process; no engine reads it.
#![allow(clippy::disallowed_methods)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{ProcNet, free_port, wait_all};

/// The text as OpenMetrics: it ends with `# EOF`, every family has HELP and TYPE once, and every sample
/// belongs to a family declared before it. Returns each sample (name with labels) and its value, and (under
/// `# family NAME` keys, value 0) each family declared.
fn parse_openmetrics(text: &str) -> BTreeMap<String, f64> {
    assert!(text.ends_with("# EOF\n"), "no # EOF at the end");
    let mut helps = BTreeSet::new();
    let mut types = BTreeMap::new();
    let mut samples = BTreeMap::new();
    let mut current = String::new();
    for line in text.lines().filter(|l| *l != "# EOF") {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap().to_string();
            assert!(helps.insert(name.clone()), "a second HELP for {name}");
            current = name;
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut w = rest.split(' ');
            let (name, kind) = (w.next().unwrap(), w.next().unwrap());
            assert!(
                types.insert(name.to_string(), kind.to_string()).is_none(),
                "a second TYPE for {name}"
            );
        } else if line.starts_with("# UNIT ") {
        } else {
            let (series, value) = line.rsplit_once(' ').expect("a sample is `name value`");
            let name = series.split('{').next().unwrap();
            assert!(
                name.starts_with(&current),
                "sample {name} outside its family {current}"
            );
            let v: f64 = value
                .parse()
                .unwrap_or_else(|_| panic!("value of {series}: {value}"));
            samples.insert(series.to_string(), v);
        }
    }
    assert_eq!(
        helps,
        types.keys().cloned().collect(),
        "every family has HELP and TYPE"
    );
    samples.extend(helps.into_iter().map(|f| (format!("# family {f}"), 0.0)));
    samples
}

/// Sum of the samples whose series starts with `prefix`.
fn sum(samples: &BTreeMap<String, f64>, prefix: &str) -> f64 {
    samples
        .iter()
        .filter(|(k, _)| k.starts_with(prefix))
        .map(|(_, v)| v)
        .sum()
}

async fn scrape(addr: SocketAddr) -> Option<BTreeMap<String, f64>> {
    let (status, kind, body) = common::http::get(addr, "/metrics").await.ok()?;
    assert_eq!(status, 200);
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    Some(parse_openmetrics(&body))
}

/// Scrapes until `done` holds (the node may not be serving yet), for at most `limit`.
async fn scrape_until(
    addr: SocketAddr,
    limit: Duration,
    done: impl Fn(&BTreeMap<String, f64>) -> bool,
) -> BTreeMap<String, f64> {
    let start = Instant::now();
    loop {
        if let Some(s) = scrape(addr).await
            && done(&s)
        {
            return s;
        }
        assert!(
            start.elapsed() < limit,
            "no scrape satisfied the test in {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_metrics_endpoint_serves_openmetrics_that_move_with_the_rounds() {
    let net = ProcNet::new(2, 2, 12, false);
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut children: Vec<_> = (0..2)
        .map(|i| {
            net.write_config(i, 1500);
            if i == 0 {
                let path = net.config_path(0);
                let text = std::fs::read_to_string(&path).unwrap();
                std::fs::write(&path, format!("metrics_addr = \"{addr}\"\n{text}")).unwrap();
            }
            net.spawn(i)
        })
        .collect();
    let round = |s: &BTreeMap<String, f64>| s.get("shatter_round").copied().unwrap_or(-1.0);
    let limit = Duration::from_secs(60);
    let first = scrape_until(addr, limit, |s| round(s) >= 1.0).await;
    let second = scrape_until(addr, limit, |s| round(s) >= round(&first) + 2.0).await;

    assert!(round(&second) > round(&first), "the round moved on");
    assert!(
        second["shatter_rounds_total"] > first["shatter_rounds_total"],
        "rounds counted"
    );
    let chunk = "shatter_wire_bytes_total{direction=\"sent\",traffic=\"chunk\"}";
    assert!(second[chunk] > first[chunk], "chunk bytes grew");
    let received = "shatter_copies_received_total";
    assert!(second[received] > first[received], "copies received grew");
    assert!(
        second["shatter_neighbours"] > 0.0,
        "the VNs have neighbours"
    );
    assert!(
        sum(&second, "shatter_vn_neighbours{vn=") > 0.0,
        "per-VN neighbours"
    );
    assert!(
        sum(&second, "shatter_round_duration_seconds_count") >= 2.0,
        "round durations observed"
    );
    assert!(
        sum(
            &second,
            "shatter_round_part_seconds_total{part=\"training\"}"
        ) > 0.0,
        "training time counted"
    );
    // libp2p's own metrics, per VN: connections and the bandwidth of the transport.
    assert!(
        sum(&second, "libp2p_swarm_connections_established_total{") > 0.0,
        "libp2p's swarm metrics are there"
    );
    assert!(
        second.keys().any(
            |k| k.starts_with("libp2p_swarm_connections_established_total{")
                && k.contains("vn=\"1\"")
        ),
        "by VN"
    );
    assert!(
        sum(&second, "libp2p_bandwidth_bytes_total{")
            > sum(&first, "libp2p_bandwidth_bytes_total{"),
        "bandwidth grew"
    );
    // Every series the Grafana dashboard queries is served.
    let dashboard = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/shatter.json"),
    )
    .unwrap();
    let mut queried = BTreeSet::new();
    for (i, _) in dashboard
        .match_indices("shatter_")
        .chain(dashboard.match_indices("libp2p_"))
    {
        let name: String = dashboard[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        queried.insert(name);
    }
    assert!(queried.len() > 10, "{queried:?}");
    // libp2p's labelled families are written from their first sample on: no connection closed, and no dial
    // failed, in this short run.
    const AFTER_FIRST_EVENT: [&str; 3] = [
        "libp2p_swarm_connections_duration_seconds_count",
        "libp2p_swarm_connections_incoming_error_total",
        "libp2p_swarm_outgoing_connection_error_total",
    ];
    for name in queried
        .iter()
        .filter(|n| !AFTER_FIRST_EVENT.contains(&n.as_str()))
    {
        assert!(
            second
                .keys()
                .filter_map(|k| k.strip_prefix("# family "))
                .any(|f| name.strip_prefix(f).is_some_and(|rest| {
                    ["", "_total", "_bucket", "_count", "_sum"].contains(&rest)
                })),
            "the dashboard queries {name}, which the node does not serve: {:?}",
            second
                .keys()
                .filter_map(|k| k.strip_prefix("# family "))
                .collect::<Vec<_>>()
        );
    }
    assert!(
        wait_all(&mut children, Duration::from_secs(90)),
        "both nodes finished"
    );
}
