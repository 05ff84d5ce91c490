//! The synthetic registry of load tests: the entries and labels `psi import --synthetic N`
//! adds, and the client runs `psi loadgen` and `psi attack` match against them.

/// Synthetic entry `k` (of `psi import --synthetic N`, `k < N`): `+1202` and 7 digits.
pub fn entry(k: u64) -> String {
    format!("+1202{k:07}")
}

/// The label of synthetic entry `k`.
pub fn label(k: u64) -> String {
    format!("user-{k}")
}

/// SplitMix64's finalizer: spreads the runs' first entries over the registry.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The contacts of run `run`: `contacts` numbers, one in `match_every` a registry entry
/// of `psi import --synthetic REGISTRY_SIZE` (distinct entries per run), the others not
/// registered; and the (index, entry) of each expected match.
pub fn contacts_of_run(
    run: u64,
    contacts: usize,
    match_every: usize,
    registry_size: u64,
) -> (Vec<Vec<u8>>, Vec<(usize, u64)>) {
    let mut expected = Vec::new();
    let items = (0..contacts)
        .map(|j| {
            if j % match_every == 0 {
                // Distinct registry entries per run.
                let k = (mix(run) + j as u64) % registry_size;
                expected.push((j, k));
                entry(k).into_bytes()
            } else {
                format!(
                    "+1303{:07}",
                    (run * contacts as u64 + j as u64) % 10_000_000
                )
                .into_bytes()
            }
        })
        .collect();
    (items, expected)
}

/// Whether `r` found exactly the `expected` matches of [`contacts_of_run`] (with `labels`:
/// each with its synthetic label `user-N`).
pub fn matches_expected(
    r: &psi_client::MatchReport,
    expected: &[(usize, u64)],
    labels: bool,
) -> bool {
    r.matches.len() == expected.len()
        && r.matches.iter().zip(expected).all(|(m, (j, k))| {
            m.index == *j && (!labels || m.label.as_deref() == Some(label(*k).as_str()))
        })
}
