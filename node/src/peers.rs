//! The peer list: which virtual nodes may take part in the network and where some of them can be reached.
//!
//! A TOML file with one `[[peer]]` table per allowed VN:
//!
//! ```toml
//! [[peer]]
//! id = "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN"
//! addr = "/ip4/192.0.2.10/tcp/4001"   # optional: makes this VN a bootstrap entry
//!
//! [[peer]]
//! id = "12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo"
//! addr = "/dns4/node-b.example/tcp/4001"  # a name, resolved when dialled (/dns4, /dns6 or /dns)
//! ```
//!
//! An address is a host (`/ip4/`, `/ip6/`, or a name: `/dns4/` for its IPv4 addresses, `/dns6/` for IPv6,
//! `/dns/` for both) and a TCP port, optionally followed by `/p2p/` and the entry's own PeerId
//! ([`check_addr`]); anything else is refused when the list is read, not when it is first dialled.
//!
//! Every node of a permissioned network uses the same list. A VN that is not on it is refused: it never
//! receives a chunk or a gossip entry, and what it sends is dropped. Peers with an `addr` seed the Cyclon
//! views of joining VNs; the others are learned through gossip.

use std::collections::BTreeMap;
use std::path::Path;

use libp2p::multiaddr::Protocol;
use libp2p::{Multiaddr, PeerId};
use serde::Deserialize;

use crate::{NodeError, Result, VnAddr};

/// Most peers a list may name. A network of 1,000 nodes with 16 virtual nodes each is 16,000; the bound
/// keeps a mistaken or hostile file from making the allow-list unbounded.
pub const MAX_PEERS: usize = 100_000;

/// The parsed peer list.
#[derive(Debug, Clone, Default)]
pub struct PeerList {
    allowed: BTreeMap<PeerId, Option<Multiaddr>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    peer: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    id: String,
    addr: Option<String>,
}

impl PeerList {
    /// Reads and checks a peer list file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| NodeError::io(path, e))?;
        Self::parse(path, &text)
    }

    /// Parses peer list text; `path` is only used in error messages.
    pub fn parse(path: &Path, text: &str) -> Result<Self> {
        let file: File =
            toml::from_str(text).map_err(|e| NodeError::file(path, "toml", e.message()))?;
        if file.peer.len() > MAX_PEERS {
            return Err(NodeError::file(
                path,
                "peer",
                format!("{} entries exceed MAX_PEERS = {MAX_PEERS}", file.peer.len()),
            ));
        }
        let mut allowed = BTreeMap::new();
        for (i, e) in file.peer.iter().enumerate() {
            let field = |f: &str| format!("peer[{i}].{f}");
            let id: PeerId = e.id.parse().map_err(|err| {
                NodeError::file(
                    path,
                    field("id"),
                    format!("'{}' is not a PeerId: {err}", e.id),
                )
            })?;
            let addr = match &e.addr {
                Some(a) => {
                    Some(parse_addr(a, &id).map_err(|m| NodeError::file(path, field("addr"), m))?)
                }
                None => None,
            };
            if allowed.insert(id, addr).is_some() {
                return Err(NodeError::file(
                    path,
                    field("id"),
                    format!("{id} is listed twice"),
                ));
            }
        }
        Ok(Self { allowed })
    }

    /// Reads `PEER_ID [MULTIADDR]` lines (what `node keygen` prints, an address added to make an entry a
    /// bootstrap one; `#` starts a comment) from several nodes' files into one list. The list is kept and
    /// written in PeerId order, whatever the order of the files and lines: concatenated node by node, a
    /// shared peer list would tell every participant which VNs are siblings (DESIGN §7).
    pub fn from_id_files(files: &[(std::path::PathBuf, String)]) -> Result<Self> {
        let mut allowed = BTreeMap::new();
        for (path, text) in files {
            for (n, line) in text.lines().enumerate() {
                let line = line.split('#').next().unwrap_or("").trim();
                if line.is_empty() {
                    continue;
                }
                let at = format!("line {}", n + 1);
                let mut words = line.split_whitespace();
                let id = words.next().unwrap_or_default();
                let id: PeerId = id.parse().map_err(|err| {
                    NodeError::file(path, &at, format!("'{id}' is not a PeerId: {err}"))
                })?;
                let addr = match words.next() {
                    Some(a) => Some(parse_addr(a, &id).map_err(|m| NodeError::file(path, &at, m))?),
                    None => None,
                };
                if let Some(extra) = words.next() {
                    return Err(NodeError::file(
                        path,
                        &at,
                        format!("'{extra}': a line is a PeerId and at most one address"),
                    ));
                }
                if allowed.insert(id, addr).is_some() {
                    return Err(NodeError::file(path, &at, format!("{id} is listed twice")));
                }
                if allowed.len() > MAX_PEERS {
                    return Err(NodeError::file(
                        path,
                        &at,
                        format!("more than MAX_PEERS = {MAX_PEERS} entries"),
                    ));
                }
            }
        }
        Ok(Self { allowed })
    }

    /// A list from identities and optional addresses (tests, the testnet, embedding).
    pub fn from_entries(entries: impl IntoIterator<Item = (PeerId, Option<Multiaddr>)>) -> Self {
        Self {
            allowed: entries.into_iter().collect(),
        }
    }

    /// Renders the list in the file format above.
    pub fn to_toml(&self) -> String {
        let mut out = String::from("# Shatter peer list: one [[peer]] per allowed virtual node.\n");
        for (id, addr) in &self.allowed {
            out.push_str(&format!("\n[[peer]]\nid = \"{id}\"\n"));
            if let Some(a) = addr {
                out.push_str(&format!("addr = \"{a}\"\n"));
            }
        }
        out
    }

    pub fn is_allowed(&self, peer: &PeerId) -> bool {
        self.allowed.contains_key(peer)
    }

    pub fn allowed(&self) -> impl Iterator<Item = &PeerId> {
        self.allowed.keys()
    }

    pub fn len(&self) -> usize {
        self.allowed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.allowed.is_empty()
    }

    /// Entries with an address, in PeerId order.
    pub fn bootstrap(&self) -> Vec<VnAddr> {
        self.allowed
            .iter()
            .filter_map(|(id, a)| a.clone().map(|a| VnAddr::new(*id, a)))
            .collect()
    }
}

/// `text` as the dialable address of VN `id`, or what is wrong with it.
fn parse_addr(text: &str, id: &PeerId) -> std::result::Result<Multiaddr, String> {
    let a: Multiaddr = text
        .parse()
        .map_err(|e| format!("'{text}' is not a multiaddr: {e}"))?;
    check_addr(&a, Some(id)).map_err(|why| format!("'{text}': {why}"))?;
    Ok(a)
}

/// Whether `a` is an address a VN can be dialled at: `/ip4/`, `/ip6/`, `/dns4/`, `/dns6/` or `/dns/` with a
/// host, then `/tcp/` with a port other than 0, then optionally `/p2p/` with `id` (when given); or
/// libp2p's in-process `/memory/N` (tests, the in-process testnet). The error says what is wrong.
pub fn check_addr(a: &Multiaddr, id: Option<&PeerId>) -> std::result::Result<(), String> {
    const FORM: &str = "a VN address is /ip4/, /ip6/, /dns4/, /dns6/ or /dns/HOST then /tcp/PORT";
    let mut parts = a.iter();
    match parts.next() {
        Some(Protocol::Ip4(_) | Protocol::Ip6(_)) => {}
        Some(Protocol::Dns(name) | Protocol::Dns4(name) | Protocol::Dns6(name)) => {
            check_host_name(&name)?
        }
        Some(Protocol::Memory(_)) => return check_peer_suffix(parts.next(), parts.next(), id),
        Some(Protocol::Dnsaddr(_)) => {
            return Err(format!(
                "/dnsaddr/ names a TXT record, not a VN's port: {FORM}"
            ));
        }
        None => return Err(format!("empty: {FORM}")),
        Some(other) => return Err(format!("starts with /{}/: {FORM}", other.tag())),
    }
    match parts.next() {
        Some(Protocol::Tcp(0)) => {
            return Err("port 0 cannot be dialled: give the port the VN listens on".into());
        }
        Some(Protocol::Tcp(_)) => {}
        Some(other) => {
            return Err(format!(
                "/{}/ where /tcp/PORT belongs: VNs are reached over TCP",
                other.tag()
            ));
        }
        None => return Err(format!("no /tcp/PORT: {FORM}")),
    }
    check_peer_suffix(parts.next(), parts.next(), id)
}

/// What may follow a VN address's host and port: nothing, or `/p2p/` with the VN's own PeerId.
fn check_peer_suffix(
    next: Option<Protocol<'_>>,
    after: Option<Protocol<'_>>,
    id: Option<&PeerId>,
) -> std::result::Result<(), String> {
    match (next, after) {
        (None, _) => Ok(()),
        (Some(Protocol::P2p(p)), None) => match id {
            Some(id) if p != *id => Err(format!("/p2p/{p} is another peer than this entry's {id}")),
            _ => Ok(()),
        },
        (Some(Protocol::P2p(_)), Some(extra)) | (Some(extra), _) => Err(format!(
            "unexpected /{}/ after the port (only /p2p/ and the VN's PeerId may follow)",
            extra.tag()
        )),
    }
}

/// A DNS name as a resolver takes it: dot-separated labels of letters, digits, `-` and `_` (1 to 63
/// characters each, no `-` at either end), at most 253 characters, an optional final dot.
pub fn check_host_name(name: &str) -> std::result::Result<(), String> {
    let bare = name.strip_suffix('.').unwrap_or(name);
    let bad = |why: &str| Err(format!("'{name}' is not a host name: {why}"));
    if bare.is_empty() {
        return bad("empty");
    }
    if bare.len() > 253 {
        return bad("longer than 253 characters");
    }
    for label in bare.split('.') {
        if label.is_empty() {
            return bad("an empty label (two dots in a row, or a leading dot)");
        }
        if label.len() > 63 {
            return bad("a label longer than 63 characters");
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
        {
            return bad(&format!("'{c}' is not a letter, digit, '-' or '_'"));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return bad("a label starts or ends with '-'");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> PeerId {
        libp2p::identity::Keypair::generate_ed25519()
            .public()
            .to_peer_id()
    }

    #[test]
    fn parses_and_renders() {
        let (a, b) = (id(), id());
        let text = format!(
            "[[peer]]\nid = \"{a}\"\naddr = \"/ip4/127.0.0.1/tcp/4001\"\n[[peer]]\nid = \"{b}\"\n"
        );
        let list = PeerList::parse(Path::new("peers.toml"), &text).unwrap();
        assert!(list.is_allowed(&a) && list.is_allowed(&b) && !list.is_allowed(&id()));
        assert_eq!(list.bootstrap().len(), 1);
        let again = PeerList::parse(Path::new("x"), &list.to_toml()).unwrap();
        assert_eq!(again.len(), 2);
        assert_eq!(again.bootstrap()[0].peer, a);
    }

    #[test]
    fn errors_name_file_entry_and_problem() {
        let p = Path::new("peers.toml");
        let err = PeerList::parse(p, "[[peer]]\nid = \"nope\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("peers.toml") && err.contains("peer[0].id") && err.contains("nope"),
            "{err}"
        );
        let a = id();
        let err = PeerList::parse(p, &format!("[[peer]]\nid = \"{a}\"\naddr = \"tcp:4001\"\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("peer[0].addr"), "{err}");
        let err = PeerList::parse(
            p,
            &format!("[[peer]]\nid = \"{a}\"\n[[peer]]\nid = \"{a}\"\n"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("peer[1].id") && err.contains("twice"), "{err}");
        let err = PeerList::parse(p, "[[peer]]\nid = \"x\"\nport = 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("port"), "{err}");
    }

    #[test]
    fn names_are_accepted_and_malformed_addresses_say_what_is_wrong() {
        let p = Path::new("peers.toml");
        let a = id();
        let entry = |addr: &str| format!("[[peer]]\nid = \"{a}\"\naddr = \"{addr}\"\n");
        for good in [
            "/dns4/localhost/tcp/4001",
            "/dns6/node-b.example/tcp/4001",
            "/dns/node_c.svc.cluster.local./tcp/65535",
            "/ip6/::1/tcp/4001",
            &format!("/dns4/localhost/tcp/4001/p2p/{a}"),
        ] {
            let list = PeerList::parse(p, &entry(good)).unwrap_or_else(|e| panic!("{good}: {e}"));
            assert_eq!(list.bootstrap()[0].addr.to_string(), good);
        }
        let other = id();
        for (bad, says) in [
            ("/dns4/localhost", "no /tcp/PORT"),
            ("/dns4/exa mple/tcp/4001", "' ' is not a letter"),
            ("/dns4/a..b/tcp/4001", "empty label"),
            ("/dns4/-a/tcp/4001", "starts or ends with '-'"),
            ("/dns4/localhost/udp/4001", "/udp/ where /tcp/PORT belongs"),
            ("/dns4/localhost/tcp/0", "port 0"),
            ("/dnsaddr/bootstrap.example", "TXT record"),
            ("/tcp/4001", "starts with /tcp/"),
            ("/dns4/localhost/tcp/4001/ws", "unexpected /ws/"),
            (
                &format!("/dns4/localhost/tcp/4001/p2p/{other}"),
                "another peer",
            ),
        ] {
            let e = PeerList::parse(p, &entry(bad)).unwrap_err().to_string();
            assert!(
                e.contains("peers.toml") && e.contains("peer[0].addr") && e.contains(says),
                "{bad}: {e}"
            );
        }
        let long = format!("/dns4/{}/tcp/1", "a".repeat(64));
        let e = PeerList::parse(p, &entry(&long)).unwrap_err().to_string();
        assert!(e.contains("longer than 63"), "{e}");
        // The keygen-file form is checked alike, naming the file and line.
        let files = [(
            std::path::PathBuf::from("a.txt"),
            format!("{a} /dns4/localhost\n"),
        )];
        let e = PeerList::from_id_files(&files).unwrap_err().to_string();
        assert!(
            e.contains("a.txt") && e.contains("line 1") && e.contains("no /tcp/PORT"),
            "{e}"
        );
        let files = [(
            std::path::PathBuf::from("a.txt"),
            format!("{a} /dns4/node-a.example/tcp/4001\n"),
        )];
        assert_eq!(
            PeerList::from_id_files(&files).unwrap().bootstrap().len(),
            1
        );
    }
}
