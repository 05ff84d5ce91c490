//! How the client's matrix of `w` columns is cut into chunk requests: the one rule both
//! the client and the size model follow.

use super::prf;

/// Columns of the chunk that starts at column `c0` of `w`, with at most `per_chunk`
/// columns (a multiple of 16) per chunk. A matrix that fits goes in one chunk. Otherwise
/// the chunks are full except that the last partial group of 16 columns (1 to 16 of them)
/// goes alone in a final chunk: the server's outputs wait for that chunk, so the less of it
/// there is to process, the sooner they leave, while the client builds that small chunk
/// during the round trip before it (spec §4.3).
pub(super) fn chunk_len(c0: usize, width: usize, per_chunk: usize) -> usize {
    let rest = width - c0;
    if c0 == 0 && rest <= per_chunk {
        return rest;
    }
    let last = width - (width - 1) / prf::GROUP * prf::GROUP;
    if rest <= last {
        return rest;
    }
    per_chunk.min(rest - last)
}

/// Chunks of a matrix of `w` columns ([`chunk_len`]).
pub(super) fn chunk_count(width: usize, per_chunk: usize) -> usize {
    let mut c0 = 0;
    let mut k = 0;
    while c0 < width {
        c0 += chunk_len(c0, width, per_chunk);
        k += 1;
    }
    k
}
