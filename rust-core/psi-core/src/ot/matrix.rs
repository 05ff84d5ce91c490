//! The OT-extension matrix as both sides expand it: rows of the transposed column PRGs,
//! the block of rows a task processes, and the calibration kernel of that PRG.

use crate::ote::{prc, transpose};

/// Rows of the OT-extension matrix processed together (PRG, transpose, codewords,
/// hashing) by one task: 1024 rows keep a task's buffers (64 KiB each) in the core's cache.
/// A multiple of 128, so blocks start on AES-CTR block boundaries.
pub(super) const BLOCK_ROWS: usize = 1024;

/// Rows `j0 .. j0 + n` (padded to a multiple of 128) of the matrix whose column `i` is
/// the AES-CTR stream of `prgs[i]`, i.e. the transpose of the 512 PRG columns.
pub(super) fn matrix_rows(prgs: &[prc::Prg], j0: usize, n: usize) -> zeroize::Zeroizing<Vec<u8>> {
    debug_assert!(j0.is_multiple_of(128) && prgs.len() == prc::CODE_BITS);
    let n_pad = n.div_ceil(128) * 128;
    let col_bytes = n_pad / 8;
    let first_block = (j0 / 128) as u64;
    let mut cols = zeroize::Zeroizing::new(vec![0u8; prc::CODE_BITS * col_bytes]);
    for (c, p) in cols.chunks_exact_mut(col_bytes).zip(prgs) {
        p.fill(first_block, c);
    }
    let mut rows = zeroize::Zeroizing::new(vec![0u8; n_pad * prc::CODE_BYTES]);
    transpose::transpose(&cols, prc::CODE_BITS, col_bytes, &mut rows);
    rows
}

/// Calibration kernel (see [`crate::cost::kernels`]): `k` AES-128 blocks of the column
/// PRG, 256 blocks (4 KiB) at a time, as the matrix code runs it.
pub(crate) fn kernel_aes_blocks(k: u32, seed: u64) -> u8 {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    let prg = prc::Prg::new(&key);
    let mut buf = [0u8; 4096];
    let mut acc = 0u8;
    let mut done = 0u64;
    while done < u64::from(k) {
        let n = (u64::from(k) - done).min(256) as usize;
        prg.fill(done, &mut buf[..16 * n]);
        acc ^= buf[0];
        done += n as u64;
    }
    acc
}
