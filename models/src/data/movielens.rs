//! MovieLens ml-latest-small ratings (`ratings.csv`), the paper's recommendation task (Shatter, PETS 2025,
//! evaluation: matrix factorisation with 20 factors over 610 users × 9,724 rated movies = 206,680 parameters).
//!
//! - **Ids.** User and movie ids are remapped to dense indices in ascending id order, over the whole file, so
//!   train and test share one mapping (movies that appear only in test still get an embedding row). With the
//!   real file that gives 610 users and 9,724 items (movies.csv lists 9,742 movies, 18 of them never rated).
//! - **Split.** Each user's ratings are shuffled with a seeded ChaCha8 stream (users visited in ascending id
//!   order) and the first `round(70%)` go to train, the rest to test: every user is in both sets, as the
//!   paper's 70/30 split needs for per-user partitioning. Samples keep the file's order within each set.
//! - **Samples.** Inputs are `(user, item)` pairs, targets the ratings (0.5–5 stars), `users` the user index.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use super::{Dataset, Inputs, Split, Targets, read_file};
use crate::{ModelsError, Result};

/// The ratings file of ml-latest-small.
pub const RATINGS_FILE: &str = "ratings.csv";
/// Its header line.
pub const HEADER: &str = "userId,movieId,rating,timestamp";
/// Share of each user's ratings that go to train (the paper's 70/30 split: 70,000 train / 30,000 test ratings).
pub const TRAIN_FRACTION: f64 = 0.7;

/// Where to get the data, for the error on a missing file.
const SOURCE_HINT: &str = "download ml-latest-small.zip from https://grouplens.org/datasets/movielens/ \
                           and unzip it (the directory holding ratings.csv is the one to pass)";

/// Loads `ratings.csv` from `dir` (either the `ml-latest-small` directory itself or its parent) and splits it
/// per user with `seed`.
pub fn load(dir: &Path, seed: u64) -> Result<Split> {
    let path = find_ratings(dir)?;
    let text = read_file(&path)?;
    let text = String::from_utf8(text).map_err(|e| {
        data_err(
            &path,
            format!("byte offset {}", e.utf8_error().valid_up_to()),
            "not UTF-8 text".into(),
        )
    })?;
    let ratings = parse(&path, &text)?;
    split(ratings, seed)
}

fn find_ratings(dir: &Path) -> Result<PathBuf> {
    let direct = dir.join(RATINGS_FILE);
    if direct.is_file() {
        return Ok(direct);
    }
    let nested = dir.join("ml-latest-small").join(RATINGS_FILE);
    if nested.is_file() {
        return Ok(nested);
    }
    Err(ModelsError::Io {
        path: direct,
        source: std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("MovieLens ml-latest-small ratings not found here; {SOURCE_HINT}"),
        ),
    })
}

fn data_err(path: &Path, location: String, message: String) -> ModelsError {
    ModelsError::Data {
        path: path.to_path_buf(),
        location,
        message,
    }
}

/// One parsed line: raw user id, raw movie id, rating.
struct Rating {
    user: u32,
    movie: u32,
    rating: f32,
}

fn parse(path: &Path, text: &str) -> Result<Vec<Rating>> {
    let mut lines = text.lines().enumerate();
    let header = lines
        .next()
        .map(|(_, l)| l.trim_start_matches('\u{feff}').trim_end())
        .unwrap_or("");
    if header != HEADER {
        return Err(data_err(
            path,
            "line 1".into(),
            format!("expected header {HEADER:?}, found {header:?}"),
        ));
    }
    let mut out = Vec::new();
    for (i, line) in lines {
        let line = line.trim_end(); // also drops the '\r' of CRLF files, as the real file has
        if line.is_empty() {
            continue;
        }
        let at = || format!("line {}", i + 1);
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() != 4 {
            return Err(data_err(
                path,
                at(),
                format!(
                    "expected 4 comma-separated fields, found {}: {line:?}",
                    fields.len()
                ),
            ));
        }
        let int = |idx: usize, name: &str| {
            fields[idx].trim().parse::<u32>().map_err(|e| {
                data_err(
                    path,
                    at(),
                    format!(
                        "{name} {:?} is not a non-negative integer: {e}",
                        fields[idx]
                    ),
                )
            })
        };
        let user = int(0, "userId")?;
        let movie = int(1, "movieId")?;
        let rating: f32 = fields[2].trim().parse().map_err(|e| {
            data_err(
                path,
                at(),
                format!("rating {:?} is not a number: {e}", fields[2]),
            )
        })?;
        if !(rating.is_finite() && (0.0..=5.0).contains(&rating)) {
            return Err(data_err(
                path,
                at(),
                format!("rating {rating} outside 0..=5"),
            ));
        }
        fields[3].trim().parse::<i64>().map_err(|e| {
            data_err(
                path,
                at(),
                format!("timestamp {:?} is not an integer: {e}", fields[3]),
            )
        })?;
        out.push(Rating {
            user,
            movie,
            rating,
        });
    }
    if out.is_empty() {
        return Err(data_err(
            path,
            "end of file".into(),
            "no ratings after the header".into(),
        ));
    }
    Ok(out)
}

fn split(ratings: Vec<Rating>, seed: u64) -> Result<Split> {
    let index = |ids: BTreeSet<u32>| -> BTreeMap<u32, u32> {
        ids.into_iter()
            .enumerate()
            .map(|(i, id)| (id, i as u32))
            .collect()
    };
    let users = index(ratings.iter().map(|r| r.user).collect());
    let items = index(ratings.iter().map(|r| r.movie).collect());

    // Rating positions per user, in file order; users in ascending id order (BTreeMap) so the RNG stream is
    // consumed in a fixed order.
    let mut by_user: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (pos, r) in ratings.iter().enumerate() {
        by_user.entry(users[&r.user]).or_default().push(pos);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut in_train = vec![false; ratings.len()];
    for positions in by_user.values_mut() {
        positions.shuffle(&mut rng);
        let n_train = (positions.len() as f64 * TRAIN_FRACTION).round() as usize;
        for &p in &positions[..n_train] {
            in_train[p] = true;
        }
    }

    let make = |train: bool| -> Result<Dataset> {
        let mut pairs = Vec::new();
        let mut targets = Vec::new();
        let mut user_of = Vec::new();
        for (r, _) in ratings.iter().zip(&in_train).filter(|(_, t)| **t == train) {
            let (u, it) = (users[&r.user], items[&r.movie]);
            pairs.push([u, it]);
            targets.push(r.rating);
            user_of.push(u);
        }
        Dataset::new(
            Inputs::Pairs {
                pairs,
                num_users: users.len(),
                num_items: items.len(),
            },
            Targets::Ratings(targets),
            Some(user_of),
        )
    };
    Ok(Split {
        train: make(true)?,
        test: make(false)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::tests::shared_data;

    fn write(dir: &Path, body: &str) {
        std::fs::write(dir.join(RATINGS_FILE), body).unwrap();
    }

    #[test]
    fn small_file_remaps_ids_and_splits_per_user() {
        let dir = tempfile::tempdir().unwrap();
        let mut body = String::from("userId,movieId,rating,timestamp\r\n");
        // User 7 rates 10 movies, user 3 rates 4; movie ids sparse.
        for m in 0..10 {
            body += &format!("7,{},{}.5,100\r\n", 100 + m * 10, m % 5);
        }
        for m in 0..4 {
            body += &format!("3,{},4.0,100\r\n", 1000 + m);
        }
        write(dir.path(), &body);
        let s = load(dir.path(), 1).unwrap();
        assert_eq!(s.train.len() + s.test.len(), 14);
        // round(0.7 * 10) = 7, round(0.7 * 4) = 3.
        let count = |d: &Dataset, u: u32| d.users().unwrap().iter().filter(|&&x| x == u).count();
        // Ascending id order: user 3 -> 0, user 7 -> 1.
        assert_eq!((count(&s.train, 1), count(&s.test, 1)), (7, 3));
        assert_eq!((count(&s.train, 0), count(&s.test, 0)), (3, 1));
        match (s.train.inputs(), s.test.inputs()) {
            (
                Inputs::Pairs {
                    num_users,
                    num_items,
                    pairs,
                },
                Inputs::Pairs {
                    num_users: nu2,
                    num_items: ni2,
                    ..
                },
            ) => {
                assert_eq!((*num_users, *num_items), (2, 14));
                assert_eq!((*nu2, *ni2), (2, 14));
                // Movie 100 is the smallest id -> item 0; movies 1000.. come after 190.
                for (p, u) in pairs.iter().zip(s.train.users().unwrap()) {
                    assert_eq!(p[0], *u);
                    assert!(if p[0] == 0 { p[1] >= 10 } else { p[1] < 10 });
                }
            }
            _ => panic!("pairs expected"),
        }
        // Seeded: same seed same split, another seed (very likely) another.
        assert_eq!(load(dir.path(), 1).unwrap(), s);
        assert_ne!(load(dir.path(), 2).unwrap(), s);
    }

    #[test]
    fn corrupt_files_name_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(RATINGS_FILE);
        let cases = [
            ("user,movie\n1,2,3,4\n", "line 1", "expected header"),
            (
                "userId,movieId,rating,timestamp\n1,2,3.0,4\n1,2,3.0\n",
                "line 3",
                "4 comma-separated",
            ),
            (
                "userId,movieId,rating,timestamp\n1,2,3.0,4\n\nx,2,3.0,4\n",
                "line 4",
                "userId \"x\"",
            ),
            (
                "userId,movieId,rating,timestamp\n1,2,7.5,4\n",
                "line 2",
                "outside 0..=5",
            ),
            (
                "userId,movieId,rating,timestamp\n1,2,NaN,4\n",
                "line 2",
                "outside",
            ),
            (
                "userId,movieId,rating,timestamp\n1,-2,3.0,4\n",
                "line 2",
                "movieId",
            ),
            (
                "userId,movieId,rating,timestamp\n1,2,3.0,soon\n",
                "line 2",
                "timestamp",
            ),
            (
                "userId,movieId,rating,timestamp\n",
                "end of file",
                "no ratings",
            ),
        ];
        for (body, location, what) in cases {
            write(dir.path(), body);
            let err = load(dir.path(), 0).unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains(&path.display().to_string()), "{msg}");
            assert!(
                msg.contains(location) && msg.contains(what),
                "{body:?}: {msg}"
            );
        }
    }

    #[test]
    fn missing_directory_says_where_to_get_the_data() {
        let dir = tempfile::tempdir().unwrap();
        let err = load(&dir.path().join("nope"), 0).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, ModelsError::Io { .. }));
        assert!(msg.contains("nope") && msg.contains("ratings.csv"), "{msg}");
        assert!(
            msg.contains("https://grouplens.org/datasets/movielens/"),
            "{msg}"
        );
        assert!(msg.contains("ml-latest-small"), "{msg}");
    }

    #[test]
    fn real_ml_latest_small() {
        let Some(root) = shared_data() else { return };
        // Both the directory itself and its parent are accepted.
        let s = load(&root.join("movielens"), 42).unwrap();
        assert_eq!(
            s,
            load(&root.join("movielens/ml-latest-small"), 42).unwrap()
        );
        let total = s.train.len() + s.test.len();
        assert_eq!(total, 100_836);
        let frac = s.train.len() as f64 / total as f64;
        assert!((0.69..0.71).contains(&frac), "train fraction {frac}");
        match s.train.inputs() {
            Inputs::Pairs {
                num_users,
                num_items,
                ..
            } => assert_eq!((*num_users, *num_items), (610, 9724)),
            _ => panic!("pairs expected"),
        }
        let train_users: BTreeSet<u32> = s.train.users().unwrap().iter().copied().collect();
        let test_users: BTreeSet<u32> = s.test.users().unwrap().iter().copied().collect();
        assert_eq!((train_users.len(), test_users.len()), (610, 610));
        let Targets::Ratings(r) = s.train.targets() else {
            panic!("ratings expected")
        };
        assert!(r.iter().all(|&x| (0.5..=5.0).contains(&x)));
    }
}
