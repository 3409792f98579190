//! The registry as OpenMetrics text.
//!
//! prometheus-client writes a metric family once per registration. A node's k VN swarms each register
//! libp2p's families (under their own `vn` label), and a test network's nodes each register ours (under a
//! `node` label), so the same family name comes several times; OpenMetrics wants each family once, with all
//! its samples. The encoder's output is grouped here: each family's descriptor once, then every sample of
//! it, in the order the families first appear. This reads only the encoder's own output, whose shape is
//! fixed: a family is its `# HELP`/`# TYPE`/`# UNIT` lines followed by its samples, and the text ends with
//! `# EOF`.

use prometheus_client::registry::Registry;

/// The content type of [`encode`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The registry as OpenMetrics text (ending `# EOF`), each family once.
pub fn encode(registry: &Registry) -> String {
    let mut raw = String::new();
    prometheus_client::encoding::text::encode(&mut raw, registry)
        .expect("writing into a String does not fail");
    merge_families(&raw)
}

/// One family of the text: its descriptor lines and its samples.
struct Family<'a> {
    name: &'a str,
    descriptor: Vec<&'a str>,
    samples: Vec<&'a str>,
}

fn merge_families(raw: &str) -> String {
    let mut families: Vec<Family<'_>> = Vec::new();
    // The family of the block being read (an index into `families`), whether the block is still in its
    // descriptor, and whether it is the family's first block (the one whose descriptor is kept).
    let mut current: Option<usize> = None;
    let mut in_descriptor = false;
    let mut first_block = false;
    for line in raw.lines() {
        if line == "# EOF" {
            break;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let name = rest.split(' ').nth(1).unwrap_or_default();
            let starts_block = !in_descriptor || current.is_none_or(|i| families[i].name != name);
            if starts_block {
                let i = match families.iter().position(|f| f.name == name) {
                    Some(i) => {
                        first_block = false;
                        i
                    }
                    None => {
                        first_block = true;
                        families.push(Family {
                            name,
                            descriptor: Vec::new(),
                            samples: Vec::new(),
                        });
                        families.len() - 1
                    }
                };
                current = Some(i);
                in_descriptor = true;
            }
            if first_block && let Some(i) = current {
                families[i].descriptor.push(line);
            }
        } else if let Some(i) = current {
            families[i].samples.push(line);
            in_descriptor = false;
        }
    }
    let mut out = String::with_capacity(raw.len());
    for f in &families {
        for line in f.descriptor.iter().chain(&f.samples) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push_str("# EOF\n");
    out
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;

    use super::*;

    /// Two VNs registering the same family give one descriptor and both samples.
    #[test]
    fn a_family_registered_under_two_labels_is_written_once_with_both_samples() {
        let mut r = Registry::default();
        for vn in ["0", "1"] {
            let c = Counter::<u64>::default();
            c.inc_by(if vn == "0" { 3 } else { 5 });
            r.sub_registry_with_label(("vn".into(), vn.into()))
                .register("copies", "Copies received", c);
        }
        let text = encode(&r);
        assert_eq!(text.matches("# HELP copies ").count(), 1, "{text}");
        assert_eq!(text.matches("# TYPE copies counter").count(), 1, "{text}");
        assert!(text.contains("copies_total{vn=\"0\"} 3"), "{text}");
        assert!(text.contains("copies_total{vn=\"1\"} 5"), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }
}
