//! Sent140 tweets in LEAF's JSON format, the paper's text task (Shatter, PETS 2025, evaluation).
//!
//! Layout: `dir/train/*.json` and `dir/test/*.json`. Each file is
//! `{"users": [..], "num_samples": .., "user_data": {"<user>": {"x": [[id, date, query, user, text, ..], ..],
//! "y": [..]}}}`; the tweet text is `x[i][4]`. Labels: `"0"` (or `0`) is negative → class 0, anything else
//! (Sentiment140 uses `"4"`) is positive → class 1. Files are read in file-name order, users within a file in
//! the order of its `users` list.
//!
//! **Features.** A dense hashed bag of words over `vocab_size` buckets:
//! 1. split the tweet on whitespace and drop `@mentions` and links (`http://`, `https://`, `www.`): they name
//!    people and pages, carry no sentiment and would only add collisions;
//! 2. lowercase, split on every non-alphanumeric character (Unicode), drop empty tokens;
//! 3. bucket = 64-bit FNV-1a of the token's UTF-8 bytes modulo `vocab_size` ("feature hashing": no
//!    vocabulary to build or ship, identical on every node, and a fixed hash, never std's randomised one);
//! 4. value = `ln(1 + count)` per bucket, which damps repeated words.
//!
//! **Users.** Train users, sorted by name, get indices `0..U`; users that appear only in test follow, sorted.
//! So partitioning the training set by user sees dense indices, and a train user keeps its index in test.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::{Dataset, Inputs, Split, Targets, read_file};
use crate::{ModelsError, Result};

/// Default number of hash buckets. Our choice, not the paper's (this crate classifies Sent140 with an MLP over
/// a hashed bag of words): the shared LEAF subset has about 4,200 distinct tokens in train (11,000 in test),
/// and 2^12 buckets keep the first layer of an MLP small while collisions stay tolerable for sentiment.
pub const DEFAULT_VOCAB_SIZE: usize = 4096;

/// Largest accepted vocabulary (bucket count): 2^20 buckets already make a dense training set of a few
/// thousand tweets take gigabytes.
pub const MAX_VOCAB_SIZE: usize = 1 << 20;

/// Index of the tweet text in a LEAF Sent140 sample `x[i]`.
const TEXT_FIELD: usize = 4;

/// Loads `dir/train/*.json` and `dir/test/*.json` with `vocab_size` hash buckets.
pub fn load(dir: &Path, vocab_size: usize) -> Result<Split> {
    if vocab_size == 0 || vocab_size > MAX_VOCAB_SIZE {
        return Err(ModelsError::Config(format!(
            "Sent140 vocabulary size must be in 1..={MAX_VOCAB_SIZE}, got {vocab_size}"
        )));
    }
    let train = read_split(&dir.join("train"))?;
    let test = read_split(&dir.join("test"))?;

    let train_users: BTreeSet<&str> = train.iter().map(|t| t.user.as_str()).collect();
    let test_only: BTreeSet<&str> = test
        .iter()
        .map(|t| t.user.as_str())
        .filter(|u| !train_users.contains(u))
        .collect();
    let user_index: BTreeMap<&str, u32> = train_users
        .iter()
        .chain(&test_only)
        .enumerate()
        .map(|(i, &u)| (u, i as u32))
        .collect();

    let make = |tweets: &[Tweet]| {
        let mut values = vec![0.0f32; tweets.len() * vocab_size];
        let mut tokens = Vec::new();
        for (t, row) in tweets.iter().zip(values.chunks_exact_mut(vocab_size)) {
            tokenize(&t.text, &mut tokens);
            for tok in &tokens {
                row[(fnv1a(tok.as_bytes()) % vocab_size as u64) as usize] += 1.0;
            }
            row.iter_mut().for_each(|v| *v = v.ln_1p());
        }
        Dataset::new(
            Inputs::Dense {
                values,
                sample_shape: vec![vocab_size],
            },
            Targets::Classes {
                labels: tweets.iter().map(|t| t.label).collect(),
                num_classes: 2,
            },
            Some(tweets.iter().map(|t| user_index[t.user.as_str()]).collect()),
        )
    };
    Ok(Split {
        train: make(&train)?,
        test: make(&test)?,
    })
}

/// Tokens of a tweet, as described in the module documentation (steps 1-2), into `out` (cleared first).
pub fn tokenize(text: &str, out: &mut Vec<String>) {
    out.clear();
    for word in text.split_whitespace() {
        let lower = word.to_lowercase();
        if lower.starts_with('@')
            || lower.starts_with("http://")
            || lower.starts_with("https://")
            || lower.starts_with("www.")
        {
            continue;
        }
        out.extend(
            lower
                .split(|c: char| !c.is_alphanumeric())
                .filter(|t| !t.is_empty())
                .map(str::to_owned),
        );
    }
}

/// 64-bit FNV-1a (offset basis 0xcbf29ce484222325, prime 0x100000001b3): tiny, fixed across platforms and
/// releases, and good enough to spread words over buckets.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

struct Tweet {
    user: String,
    text: String,
    label: u32,
}

#[derive(Deserialize)]
struct LeafFile {
    users: Vec<String>,
    user_data: BTreeMap<String, UserData>,
}

#[derive(Deserialize)]
struct UserData {
    x: Vec<Vec<Value>>,
    y: Vec<Value>,
}

/// All tweets of the `*.json` files of one split directory, in file-name order.
fn read_split(dir: &Path) -> Result<Vec<Tweet>> {
    let entries = std::fs::read_dir(dir).map_err(|source| ModelsError::Io {
        path: dir.to_path_buf(),
        source: std::io::Error::new(
            source.kind(),
            format!(
                "cannot list the Sent140 split directory ({source}); expected LEAF JSON files in \
                 <dir>/train and <dir>/test (see https://github.com/TalwalkarLab/leaf, sent140)"
            ),
        ),
    })?;
    let mut files: Vec<PathBuf> = Vec::new();
    for e in entries {
        let e = e.map_err(|source| ModelsError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let p = e.path();
        if p.extension().is_some_and(|x| x == "json") {
            files.push(p);
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(ModelsError::Data {
            path: dir.to_path_buf(),
            location: "directory".into(),
            message: "no *.json files (LEAF Sent140 format expected)".into(),
        });
    }
    let mut tweets = Vec::new();
    for f in &files {
        read_leaf_file(f, &mut tweets)?;
    }
    Ok(tweets)
}

fn read_leaf_file(path: &Path, out: &mut Vec<Tweet>) -> Result<()> {
    let bytes = read_file(path)?;
    let file: LeafFile = serde_json::from_slice(&bytes).map_err(|e| ModelsError::Data {
        path: path.to_path_buf(),
        location: format!("line {} column {}", e.line(), e.column()),
        message: format!("not a LEAF JSON file: {e}"),
    })?;
    let err = |location: String, message: String| ModelsError::Data {
        path: path.to_path_buf(),
        location,
        message,
    };
    for user in &file.users {
        let data = file.user_data.get(user).ok_or_else(|| {
            err(
                format!("users entry {user:?}"),
                "user listed in \"users\" has no user_data".into(),
            )
        })?;
        if data.x.len() != data.y.len() {
            return Err(err(
                format!("user_data.{user:?}"),
                format!(
                    "{} samples in x but {} labels in y",
                    data.x.len(),
                    data.y.len()
                ),
            ));
        }
        for (i, (x, y)) in data.x.iter().zip(&data.y).enumerate() {
            let text = x.get(TEXT_FIELD).and_then(Value::as_str).ok_or_else(|| {
                err(
                    format!("user_data.{user:?}.x[{i}]"),
                    format!("element {TEXT_FIELD} (the tweet text) is missing or not a string"),
                )
            })?;
            let label = match y {
                Value::String(s) => u32::from(s.trim() != "0"),
                Value::Number(n) => u32::from(n.as_f64() != Some(0.0)),
                Value::Bool(b) => u32::from(*b),
                other => {
                    return Err(err(
                        format!("user_data.{user:?}.y[{i}]"),
                        format!("label {other} is neither a string nor a number"),
                    ));
                }
            };
            out.push(Tweet {
                user: user.clone(),
                text: text.to_owned(),
                label,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::tests::shared_data;

    fn leaf(users: &[(&str, &[(&str, &str)])]) -> String {
        let names: Vec<Value> = users.iter().map(|(u, _)| Value::from(*u)).collect();
        let mut data = serde_json::Map::new();
        for (u, samples) in users {
            let x: Vec<Value> = samples
                .iter()
                .map(|(text, _)| serde_json::json!(["1", "date", "NO_QUERY", u, text, "training"]))
                .collect();
            let y: Vec<Value> = samples.iter().map(|(_, l)| Value::from(*l)).collect();
            data.insert(u.to_string(), serde_json::json!({"x": x, "y": y}));
        }
        serde_json::json!({"users": names, "num_samples": [], "user_data": data}).to_string()
    }

    fn dataset_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["train", "test"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        std::fs::write(
            dir.path().join("train/b.json"),
            leaf(&[(
                "zed",
                &[("I love it!! love", "4"), ("@bob sad day http://x.y", "0")],
            )]),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("train/a.json"),
            leaf(&[("amy", &[("Great", "4")])]),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("test/t.json"),
            leaf(&[("zed", &[("meh", "0")]), ("carl", &[("fine", "4")])]),
        )
        .unwrap();
        std::fs::write(dir.path().join("test/README.txt"), "not json").unwrap();
        dir
    }

    #[test]
    fn tokenizer_and_hash_are_the_documented_ones() {
        let mut t = Vec::new();
        tokenize(
            "@Bob I LOVE it!!  http://x.co/a www.y.com don't ÉTÉ",
            &mut t,
        );
        assert_eq!(t, ["i", "love", "it", "don", "t", "été"]);
        // Reference values of 64-bit FNV-1a.
        assert_eq!(fnv1a(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a(b"a"), 0xaf63dc4c8601ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x85944171f73967e8);
    }

    #[test]
    fn small_leaf_files() {
        let dir = dataset_dir();
        let v = 64;
        let s = load(dir.path(), v).unwrap();
        // Files in name order: a.json (amy) then b.json (zed).
        assert_eq!(s.train.len(), 3);
        assert_eq!(s.train.labels().unwrap(), &[1, 1, 0]);
        assert_eq!(s.train.num_classes(), Some(2));
        // Train users sorted: amy 0, zed 1; test-only carl gets 2.
        assert_eq!(s.train.users().unwrap(), &[0, 1, 1]);
        assert_eq!(s.test.users().unwrap(), &[1, 2]);
        assert_eq!(s.test.labels().unwrap(), &[0, 1]);
        let Inputs::Dense {
            values,
            sample_shape,
        } = s.train.inputs()
        else {
            panic!()
        };
        assert_eq!(sample_shape, &[v]);
        // "I love it!! love": love twice -> ln(3) in its bucket (unless i/it collide with it).
        let bucket = |w: &str| (fnv1a(w.as_bytes()) % v as u64) as usize;
        let row = &values[v..2 * v];
        let expected_love = if bucket("i") == bucket("love") || bucket("it") == bucket("love") {
            None
        } else {
            Some(3f32.ln())
        };
        if let Some(e) = expected_love {
            assert!((row[bucket("love")] - e).abs() < 1e-6);
        }
        // "@bob sad day http://x.y": only "sad" and "day" remain.
        let row = &values[2 * v..3 * v];
        let nonzero = row.iter().filter(|&&x| x > 0.0).count();
        assert_eq!(nonzero, if bucket("sad") == bucket("day") { 1 } else { 2 });
    }

    #[test]
    fn corrupt_and_missing_inputs_are_located() {
        let dir = dataset_dir();
        let bad = dir.path().join("train/c.json");
        std::fs::write(
            &bad,
            "{\"users\": [\"q\"],\n \"user_data\": {\"q\": {\"x\": [[1,2]",
        )
        .unwrap();
        let msg = load(dir.path(), 16).unwrap_err().to_string();
        assert!(
            msg.contains("c.json") && msg.contains("line 2 column"),
            "{msg}"
        );

        std::fs::write(
            &bad,
            r#"{"users": ["q"], "user_data": {"q": {"x": [["1","d","n","q","ok"], ["1","d"]], "y": ["0","4"]}}}"#,
        )
        .unwrap();
        let msg = load(dir.path(), 16).unwrap_err().to_string();
        assert!(
            msg.contains("c.json") && msg.contains("x[1]") && msg.contains("tweet text"),
            "{msg}"
        );

        std::fs::write(
            &bad,
            r#"{"users": ["q", "r"], "user_data": {"q": {"x": [], "y": []}}}"#,
        )
        .unwrap();
        let msg = load(dir.path(), 16).unwrap_err().to_string();
        assert!(msg.contains("c.json") && msg.contains("\"r\""), "{msg}");

        std::fs::write(
            &bad,
            r#"{"users": ["q"], "user_data": {"q": {"x": [], "y": ["0"]}}}"#,
        )
        .unwrap();
        let msg = load(dir.path(), 16).unwrap_err().to_string();
        assert!(msg.contains("0 samples in x but 1 labels"), "{msg}");
        std::fs::remove_file(&bad).unwrap();

        let msg = load(&dir.path().join("nowhere"), 16)
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("nowhere") && msg.contains("train") && msg.contains("leaf"),
            "{msg}"
        );
        assert!(matches!(load(dir.path(), 0), Err(ModelsError::Config(_))));
    }

    #[test]
    fn real_leaf_subset() {
        let Some(root) = shared_data() else { return };
        let s = load(&root.join("sent140"), DEFAULT_VOCAB_SIZE).unwrap();
        // 50 train users (one file each, 2,134 tweets); the test file holds 772 users (8,484 tweets), 50 of
        // them the train users.
        assert_eq!((s.train.len(), s.test.len()), (2134, 8484));
        let train_users: BTreeSet<u32> = s.train.users().unwrap().iter().copied().collect();
        assert_eq!(train_users, (0..50).collect());
        let test_users: BTreeSet<u32> = s.test.users().unwrap().iter().copied().collect();
        assert_eq!(test_users.len(), 772);
        assert_eq!(test_users.iter().max(), Some(&771));
        let labels = s.train.labels().unwrap();
        let pos = labels.iter().filter(|&&l| l == 1).count();
        assert!(
            pos > 200 && pos < 1934,
            "{pos} positives: both classes should be present"
        );
        let Inputs::Dense { values, .. } = s.train.inputs() else {
            panic!()
        };
        // Almost every tweet has at least one token.
        let empty = values
            .chunks_exact(DEFAULT_VOCAB_SIZE)
            .filter(|r| r.iter().all(|&x| x == 0.0))
            .count();
        assert!(empty < 20, "{empty} empty tweets");
    }
}
