use candle_core::{DType, Device, Tensor};

use super::*;
use crate::data::{Dataset, Inputs, Targets};

fn classification(shape: &[usize], classes: usize) -> TaskInfo {
    TaskInfo::Classification {
        sample_shape: shape.to_vec(),
        num_classes: classes,
    }
}

fn rating(users: usize, items: usize) -> TaskInfo {
    TaskInfo::Rating {
        num_users: users,
        num_items: items,
        offset: 3.5,
    }
}

fn build(spec: &ModelSpec, info: &TaskInfo, seed: u64) -> Model {
    Model::new(spec, info, seed, &Device::Cpu).unwrap()
}

/// Small instances of every architecture, with a task each fits.
fn zoo() -> Vec<(ModelSpec, TaskInfo)> {
    vec![
        (
            ModelSpec::Mlp {
                hidden: vec![16, 8],
            },
            classification(&[10], 3),
        ),
        (ModelSpec::LeNet, classification(&[1, 28, 28], 10)),
        (ModelSpec::ResNet8, classification(&[3, 16, 16], 10)),
        (
            ModelSpec::MatrixFactorization {
                factors: 4,
                centred: true,
            },
            rating(30, 50),
        ),
    ]
}

#[test]
fn model_is_send_and_sync() {
    fn check<T: Send + Sync + 'static>() {}
    check::<Model>();
}

#[test]
fn same_seed_gives_bit_identical_params_and_other_seeds_differ() {
    for (spec, info) in zoo() {
        let a = build(&spec, &info, 42).flat_params().unwrap();
        let b = build(&spec, &info, 42).flat_params().unwrap();
        let c = build(&spec, &info, 43).flat_params().unwrap();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&a),
            bits(&b),
            "{spec}: same seed must give the same model"
        );
        assert_ne!(a, c, "{spec}: another seed must give another model");
        assert!(a.iter().all(|v| v.is_finite()));
        // Not all zero (the recorder creates zeros; the init must have overwritten them). ResNet's zero-init
        // residual convolutions are most of its weights, hence only a quarter.
        assert!(
            a.iter().filter(|&&v| v != 0.0).count() > a.len() / 4,
            "{spec}"
        );
    }
}

#[test]
fn init_values_are_pinned() {
    // Guards against accidental changes of the init order or RNG: every node of a run, and every version of
    // the code that must interoperate, has to produce these values.
    let m = build(
        &ModelSpec::Mlp { hidden: vec![4] },
        &classification(&[3], 2),
        7,
    );
    let p = m.flat_params().unwrap();
    assert_eq!(p.len(), 4 + 12 + 2 + 8);
    // hidden.0.bias ~ U(±1/sqrt(3)), hidden.0.weight ~ U(±sqrt(6/3)), out.* ~ U(±1/2).
    assert!(p[..4].iter().all(|v| v.abs() <= 1.0 / 3f32.sqrt()));
    assert!(p[4..16].iter().all(|v| v.abs() <= 2f32.sqrt()));
    assert!(p[16..].iter().all(|v| v.abs() <= 0.5));
    // The first values, bit for bit (ChaCha8 seeded with 7, name order, f64 draws rounded to f32).
    let bits: Vec<u32> = p[..6].iter().map(|v| v.to_bits()).collect();
    assert_eq!(
        bits,
        [
            3200929840, 3200534899, 1047628272, 1048972556, 1049797507, 3201018243
        ]
    );
}

#[test]
fn mf_has_the_papers_parameter_count() {
    // Shatter (PETS 2025), experimental setup: ml-latest-small, 610 users x 9,724 rated movies, 20 factors, no biases = 206,680.
    let m = build(
        &ModelSpec::MatrixFactorization {
            factors: 20,
            centred: true,
        },
        &rating(610, 9724),
        0,
    );
    assert_eq!(m.num_params(), 206_680);
    assert_eq!(
        m.param_layout(),
        vec![
            ("items".to_string(), 9724 * 20),
            ("users".to_string(), 610 * 20)
        ]
    );
}

#[test]
fn resnet18_has_about_11_2m_params_and_resnet8_is_small() {
    let m = build(&ModelSpec::ResNet18, &classification(&[3, 32, 32], 10), 0);
    // Conv weights of CIFAR ResNet-18 (11,159,232) + 1x1 shortcuts in them + conv biases (4,800) + head (5,130).
    let conv = |i: usize, o: usize, k: usize| i * o * k * k + o;
    let mut expected = conv(3, 64, 3);
    let mut c_in = 64;
    for (s, width) in [64, 128, 256, 512].into_iter().enumerate() {
        for b in 0..2 {
            expected += conv(c_in, width, 3) + conv(width, width, 3);
            if s > 0 && b == 0 {
                expected += conv(c_in, width, 1);
            }
            c_in = width;
        }
    }
    expected += 512 * 10 + 10;
    println!(
        "ResNet-18 (no BN, 3x32x32, 10 classes): {} parameters",
        m.num_params()
    );
    assert_eq!(m.num_params(), expected);
    assert!((11_100_000..11_300_000).contains(&m.num_params()));

    let small = build(&ModelSpec::ResNet8, &classification(&[3, 32, 32], 10), 0);
    println!("ResNet-8: {} parameters", small.num_params());
    assert!(
        (70_000..90_000).contains(&small.num_params()),
        "{}",
        small.num_params()
    );
    // The last conv of every residual branch starts at zero (blocks start as the identity).
    for (name, var) in &small.vars {
        if name.ends_with("conv2.weight") {
            let v = var
                .as_tensor()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            assert!(v.iter().all(|&x| x == 0.0), "{name}");
        }
    }
}

#[test]
fn forward_shapes() {
    let dev = Device::Cpu;
    let x = |shape: &[usize]| Tensor::randn(0f32, 1.0, shape, &dev).unwrap();
    let cases: Vec<(ModelSpec, TaskInfo, Vec<usize>)> = vec![
        (
            ModelSpec::Mlp { hidden: vec![8] },
            classification(&[10], 3),
            vec![5, 10],
        ),
        // Sent140-style bag-of-words: a long dense vector.
        (
            ModelSpec::Mlp { hidden: vec![8] },
            classification(&[4096], 2),
            vec![3, 4096],
        ),
        // MLP over images flattens them.
        (
            ModelSpec::Mlp { hidden: vec![] },
            classification(&[1, 28, 28], 10),
            vec![2, 1, 28, 28],
        ),
        (
            ModelSpec::LeNet,
            classification(&[1, 28, 28], 10),
            vec![2, 1, 28, 28],
        ),
        (
            ModelSpec::LeNet,
            classification(&[3, 32, 32], 10),
            vec![2, 3, 32, 32],
        ),
        (
            ModelSpec::ResNet8,
            classification(&[3, 32, 32], 10),
            vec![2, 3, 32, 32],
        ),
        (
            ModelSpec::ResNet8,
            classification(&[1, 28, 28], 7),
            vec![2, 1, 28, 28],
        ),
        (
            ModelSpec::ResNet18,
            classification(&[3, 32, 32], 10),
            vec![1, 3, 32, 32],
        ),
    ];
    for (spec, info, shape) in cases {
        let m = build(&spec, &info, 1);
        let TaskInfo::Classification { num_classes, .. } = info else {
            unreachable!()
        };
        let y = m.forward(&x(&shape)).unwrap();
        assert_eq!(y.dims(), &[shape[0], num_classes], "{spec} on {shape:?}");
        let v = y.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(v.iter().all(|x| x.is_finite()), "{spec}");
    }

    let m = build(
        &ModelSpec::MatrixFactorization {
            factors: 3,
            centred: true,
        },
        &rating(4, 6),
        1,
    );
    let pairs = Tensor::from_vec(vec![0u32, 5, 3, 0, 2, 2], (3, 2), &dev).unwrap();
    let y = m.forward(&pairs).unwrap();
    assert_eq!(y.dims(), &[3]);
    // Predictions are the offset plus a dot product of small embeddings.
    for v in y.to_vec1::<f32>().unwrap() {
        assert!((v - 3.5).abs() < 0.5, "{v}");
    }
}

#[test]
fn reference_mf_ignores_the_offset_and_starts_uniform_in_005() {
    let spec = ModelSpec::MatrixFactorization {
        factors: 4,
        centred: false,
    };
    let mut m = build(&spec, &rating(5, 7), 3);
    let p = m.flat_params().unwrap();
    assert_eq!(p.len(), (5 + 7) * 4);
    assert!(p.iter().all(|v| v.abs() <= 0.05), "{p:?}");
    // Not degenerate: the entries spread over the interval.
    assert!(p.iter().any(|v| *v > 0.03) && p.iter().any(|v| *v < -0.03));
    // Flat order: items (7x4) then users (5x4). The offset 3.5 of the task is not added.
    let mut q = vec![0.0f32; p.len()];
    q[0] = 2.0; // item 0, factor 0
    q[28] = 1.5; // user 0, factor 0
    m.set_flat_params(&q).unwrap();
    let pairs = Tensor::from_vec(vec![0u32, 0, 1, 0], (2, 2), &Device::Cpu).unwrap();
    let y = m.forward(&pairs).unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(y, vec![3.0, 0.0]);
}

#[test]
fn mf_prediction_is_dot_product_plus_offset() {
    let info = TaskInfo::Rating {
        num_users: 2,
        num_items: 3,
        offset: 1.0,
    };
    let mut m = build(
        &ModelSpec::MatrixFactorization {
            factors: 2,
            centred: true,
        },
        &info,
        0,
    );
    // Flat order: items (3x2) then users (2x2).
    m.set_flat_params(&[1., 2., 3., 4., 5., 6., 0.5, -1., 2., 0.])
        .unwrap();
    let pairs = Tensor::from_vec(vec![0u32, 0, 0, 2, 1, 1], (3, 2), &Device::Cpu).unwrap();
    let y = m.forward(&pairs).unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(y, vec![1.0 + 0.5 - 2.0, 1.0 + 2.5 - 6.0, 1.0 + 6.0]);
}

#[test]
fn spec_and_task_that_do_not_fit_are_config_errors() {
    let dev = Device::Cpu;
    let bad = [
        (
            ModelSpec::MatrixFactorization {
                factors: 20,
                centred: true,
            },
            classification(&[3, 32, 32], 10),
        ),
        (ModelSpec::LeNet, classification(&[784], 10)),
        (ModelSpec::LeNet, classification(&[1, 8, 8], 10)),
        (ModelSpec::ResNet18, classification(&[100], 2)),
        (ModelSpec::Mlp { hidden: vec![8] }, rating(3, 3)),
        (ModelSpec::ResNet8, rating(3, 3)),
        (ModelSpec::Mlp { hidden: vec![0] }, classification(&[4], 2)),
        (
            ModelSpec::MatrixFactorization {
                factors: 0,
                centred: true,
            },
            rating(3, 3),
        ),
    ];
    for (spec, info) in bad {
        match Model::new(&spec, &info, 0, &dev) {
            Err(ModelsError::Config(msg)) => assert!(!msg.is_empty()),
            other => panic!("{spec} on {info:?}: expected a config error, got {other:?}"),
        }
    }
}

#[test]
fn spec_text_round_trips() {
    for s in [
        "mlp",
        "mlp:256,64",
        "mlp:",
        "lenet",
        "resnet8",
        "resnet18",
        "mf",
        "mf:32",
        "mf-centred",
        "mf-centred:8",
    ] {
        let spec: ModelSpec = s.parse().unwrap();
        assert_eq!(spec.to_string(), s);
        assert_eq!(spec.to_string().parse::<ModelSpec>().unwrap(), spec);
        let json = serde_json::to_string(&spec).unwrap();
        assert_eq!(serde_json::from_str::<ModelSpec>(&json).unwrap(), spec);
    }
    assert_eq!(
        "MF".parse::<ModelSpec>().unwrap(),
        ModelSpec::MatrixFactorization {
            factors: 20,
            centred: false
        }
    );
    assert_eq!(
        "mlp".parse::<ModelSpec>().unwrap(),
        ModelSpec::Mlp {
            hidden: DEFAULT_MLP_HIDDEN.to_vec()
        }
    );
    for bad in ["cnn", "mf:0", "mf:x", "mlp:3,,4", "lenet:5", ""] {
        assert!(bad.parse::<ModelSpec>().is_err(), "{bad:?}");
    }
}

#[test]
fn task_info_of_datasets() {
    let images = Dataset::new(
        Inputs::Dense {
            values: vec![0.0; 2 * 3 * 4 * 4],
            sample_shape: vec![3, 4, 4],
        },
        Targets::Classes {
            labels: vec![0, 9],
            num_classes: 10,
        },
        None,
    )
    .unwrap();
    assert_eq!(
        TaskInfo::of(&images).unwrap(),
        classification(&[3, 4, 4], 10)
    );

    let ratings = Dataset::new(
        Inputs::Pairs {
            pairs: vec![[0, 1], [1, 2]],
            num_users: 2,
            num_items: 3,
        },
        Targets::Ratings(vec![3.0, 4.0]),
        None,
    )
    .unwrap();
    let info = TaskInfo::of(&ratings).unwrap();
    assert_eq!(
        info,
        TaskInfo::Rating {
            num_users: 2,
            num_items: 3,
            offset: 3.5
        }
    );
    assert!(info.check(&ratings).is_ok());
    assert!(info.check(&images).is_err());
    assert!(classification(&[3, 4, 4], 9).check(&images).is_err());
    assert_eq!(
        ModelSpec::default_for(&info),
        ModelSpec::MatrixFactorization {
            factors: 20,
            centred: false
        }
    );

    let odd = Dataset::new(
        Inputs::Dense {
            values: vec![0.0; 2],
            sample_shape: vec![1],
        },
        Targets::Ratings(vec![1.0, 2.0]),
        None,
    )
    .unwrap();
    assert!(matches!(TaskInfo::of(&odd), Err(ModelsError::Config(_))));
}

#[test]
fn perturb_is_seeded_and_scaled() {
    let spec = ModelSpec::Mlp { hidden: vec![8] };
    let info = classification(&[5], 2);
    let base = build(&spec, &info, 3).flat_params().unwrap();
    let mut a = build(&spec, &info, 3);
    let mut b = build(&spec, &info, 3);
    a.perturb(11, 0.01).unwrap();
    b.perturb(11, 0.01).unwrap();
    let (pa, pb) = (a.flat_params().unwrap(), b.flat_params().unwrap());
    assert_eq!(pa, pb);
    assert_ne!(pa, base);
    let max_diff = pa
        .iter()
        .zip(&base)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(max_diff > 0.0 && max_diff < 0.06, "{max_diff}");
    b.perturb(12, 0.0).unwrap();
    assert_eq!(b.flat_params().unwrap(), pa);
    assert!(a.perturb(1, f32::NAN).is_err());
}

#[test]
fn forward_rejects_wrong_input_shape() {
    let m = build(
        &ModelSpec::Mlp { hidden: vec![4] },
        &classification(&[6], 2),
        0,
    );
    let x = Tensor::zeros((2, 5), DType::F32, &Device::Cpu).unwrap();
    assert!(matches!(m.forward(&x), Err(ModelsError::Candle(_))));
}
