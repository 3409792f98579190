//! `cargo run -p testnet`. Placeholder: filled in by issue 5.

fn main() -> anyhow::Result<()> {
    anyhow::bail!("the testnet runner is not built yet (issue 5)")
}
