//! Tests of `diag`.

use super::*;

/// Write a launch of `kernel` on `device` with a 3×4 float32 array and the int 12.
fn launch_of(device: usize, kernel: &'static str) -> u64 {
    name_kernel(kernel);
    write(device, |s| {
        s.launch(kernel, [2, 1, 1], [128, 1, 1], 0, 1, 2, 0);
        s.args()[0].array(DType::F32, &[3, 4], 0x7000);
        s.args()[1].int(12);
    })
}

#[test]
fn the_ring_keeps_the_newest_launches_per_device_and_formats_them() {
    // Devices of their own: the other tests (and GPU tests in the process) use theirs.
    for _ in 0..RING_LEN + 3 {
        launch_of(7, "old<float>");
    }
    let seq = launch_of(7, "axpy<float>");
    launch_of(9, "other");
    let r = recent(7);
    assert_eq!(r.len(), RING_LEN);
    assert_eq!((r[0].kernel, r[0].seq), ("axpy<float>", seq));
    assert!(r.windows(2).all(|w| w[0].seq == w[1].seq + 1));
    assert_eq!(recent(9).len(), 1);
    assert_eq!(launch(7, seq), Some(r[0]));
    assert_eq!(launch(7, seq - RING_LEN as u64), None, "overwritten");
    assert_eq!(
        r[0].to_string(),
        format!("#{seq} axpy<float> grid (2, 1, 1) block (128, 1, 1) on device 7 stream 0x1 with (float32[3, 4] at 0x7000, 12)")
    );
    assert_eq!(write(DEVICES + 1, |_| panic!("no ring")), 0);
}

#[test]
fn a_reused_slot_shows_only_its_own_launch() {
    let (two, none) = ("two", "none");
    name_kernel(two);
    name_kernel(none);
    write(11, |s| {
        s.launch(two, [1; 3], [1; 3], 0, 1, 2, 0);
        s.args()[0].array(DType::F64, &[5, 6, 7], 0x10);
        s.args()[1].complex(1.0, -2.0);
    });
    for _ in 1..RING_LEN {
        launch_of(11, "filler");
    }
    write(11, |s| s.launch(none, [3, 4, 5], [6, 7, 8], 96, 0x55, 1, 0));
    let newest = recent(11)[0];
    assert_eq!((newest.kernel, newest.grid, newest.block, newest.shared_mem, newest.stream), ("none", [3, 4, 5], [6, 7, 8], 96, 0x55));
    // Its one argument was not written: the slot's older one is not shown as its.
    assert_eq!(newest.nargs, 1);
    assert_eq!(newest.args[0], Some(ArgSummary::Array { dtype: DType::F64, ndim: 3, shape: [5, 6, 7, 0], ptr: 0x10 }));
    assert_eq!(newest.args[1], None);
}

#[test]
fn every_kind_of_argument_reads_back_exactly() {
    let kinds = "kinds";
    name_kernel(kinds);
    let big = -(1i128 << 100) + 7;
    let seq = write(12, |s| {
        s.launch(kinds, [1; 3], [1; 3], 0, 1, ARGS_KEPT + 2, 0);
        let a = s.args();
        a[0].array(DType::I64, &[1, 2, 3, 4, 5, 6], 0x10);
        a[1].int(big);
        a[2].int(u64::MAX.into());
        a[3].bool(true);
        a[4].float(0.5);
        a[5].complex(1.0, -2.0);
        a[6].bytes(24);
        a[7].pointer(0xbeef);
    });
    let r = launch(12, seq).unwrap();
    assert_eq!(
        r.arguments(),
        [
            "int64[1, 2, 3, 4, …] at 0x10".to_string(),
            big.to_string(),
            u64::MAX.to_string(),
            "true".into(),
            "0.5".into(),
            "(1.0-2.0j)".into(),
            "struct of 24 bytes".into(),
            "pointer 0xbeef".into(),
            "… 2 more".into(),
        ]
    );
    for (i, d) in DType::ALL.into_iter().enumerate() {
        assert_eq!(d as usize, i, "a dtype's code is its place in DType::ALL");
    }
}

#[test]
fn a_slot_being_written_is_not_read() {
    let torn = "torn";
    name_kernel(torn);
    let mut seen_inside = None;
    write(13, |s| {
        s.launch(torn, [1; 3], [1; 3], 0, 1, 0, 0);
        seen_inside = Some(recent(13).len());
    });
    assert_eq!(seen_inside, Some(0));
    assert_eq!(recent(13).len(), 1);
}

#[test]
fn a_site_is_named_by_the_function_set_for_it_and_taken_once() {
    set_site(77);
    assert_eq!((take_site(), take_site()), (77, 0));
    set_site_names(|t| (t == 77).then(|| "here.py:3".to_string()));
    let sited = "sited";
    name_kernel(sited);
    let seq = write(14, |s| s.launch(sited, [1; 3], [1; 3], 0, 1, 0, 77));
    let r = launch(14, seq).unwrap();
    assert_eq!(r.call_site().as_deref(), Some("here.py:3"));
    assert!(r.to_string().ends_with("with () from here.py:3"), "{r}");
}

#[test]
fn a_launch_whose_slot_is_still_being_written_is_left_out() {
    let slow = "slow";
    name_kernel(slow);
    let mut inner = Vec::new();
    let outer = write(16, |s| {
        s.launch(slow, [1; 3], [1; 3], 0, 1, 0, 0);
        // RING_LEN launches while this one writes: the last wants this one's slot.
        inner = (0..RING_LEN).map(|_| launch_of(16, "fast")).collect();
        s.args()[0].int(5);
    });
    assert_eq!(inner.last(), Some(&0));
    assert!(inner[..RING_LEN - 1].iter().all(|&q| q != 0));
    assert_eq!(launch(16, outer).map(|r| r.kernel), Some("slow"));
}

#[test]
fn concurrent_writers_leave_only_whole_records() {
    // Names are told apart by address: one static each (two equal literals need not
    // share one).
    static NAMES: [&str; 2] = ["a", "b"];
    NAMES.into_iter().for_each(name_kernel);
    let fill = |kernel: &'static str, n: u32| {
        move |s: &Slot| {
            s.launch(kernel, [n; 3], [n; 3], n, u64::from(n), 1, 0);
            s.args()[0].int(n.into());
        }
    };
    std::thread::scope(|scope| {
        for (kernel, n) in NAMES.into_iter().zip(1..) {
            scope.spawn(move || {
                for _ in 0..20_000 {
                    write(15, fill(kernel, n));
                }
            });
        }
        for _ in 0..2_000 {
            for r in recent(15) {
                let n = r.grid[0];
                let whole = r.grid == [n; 3] && r.block == [n; 3] && r.shared_mem == n && r.stream == u64::from(n);
                assert!(whole && r.args[0] == Some(ArgSummary::Scalar(ScalarShown::Int(n.into()))), "{r:?}");
                assert_eq!(r.kernel, NAMES[n as usize - 1]);
            }
        }
    });
}

#[test]
fn sticky_codes_are_the_faults_that_poison_a_context() {
    for code in [700, 710, 716, 719] {
        assert!(is_sticky(code));
    }
    for code in [0, 1, 2, 98, 201, 400, 999] {
        assert!(!is_sticky(code));
    }
}
