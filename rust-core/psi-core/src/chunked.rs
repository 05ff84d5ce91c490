//! The session skeleton the two OT-extension protocols share, OT-PSI ([`crate::ot`]) and
//! CM20-PSI ([`crate::cm20`]). Both run the same five messages in the same order, the
//! client driving:
//!
//! ```text
//! client                         server
//! hello                    ──▶
//!                          ◀──   setup
//! matrix chunk             ──▶
//!                          ◀──   chunk ack          (repeated)
//! matrix chunk (the last)  ──▶
//!                          ◀──   outputs
//! ```
//!
//! This module owns what follows from that shape alone: the message type numbers, the
//! phases of either side and their names (in [`crate::Error::WrongPhase`]), the step a
//! client driver loops on, the checks of the hello's declared set size against the
//! server's configuration, and the in-memory run loop. What the messages carry, and all
//! of the cryptography, stays with each protocol.
//!
//! Deliberately not shared, because the two differ in substance: the bodies of the five
//! messages (OT-PSI acks a row as a u32, CM20-PSI a column as a u16; OT-PSI's outputs are
//! three shuffled lists, CM20-PSI's one Golomb-Rice coded sorted list), the configs'
//! chunking (rows vs. request bytes and matrix height), OT-PSI's hello in parts (the
//! `Starting` client phase, which CM20-PSI fills with [`std::convert::Infallible`]), and
//! every protocol limit (`MAX_ITEMS` is each protocol's own, documented in its spec).

use crate::error::{DecodeError, Error, Result};
use crate::ote::base_ot::{BASE_OTS, RECEIVER_MSG_LEN};
use crate::output::MatchOutput;
use crate::phase::Phase;
use crate::wire::Reader;
use zeroize::Zeroizing;

/// Message types (byte 4 of the frame header), the same in both protocols.
pub mod message_type {
    /// Client → server: session parameters and the base-OT receiver messages.
    pub const HELLO: u8 = 0x01;
    /// Server → client: the server's parameters, base-OT sender point and IKNP matrix.
    pub const SETUP: u8 = 0x02;
    /// Client → server: a run of the OT-extension matrix (rows or columns).
    pub const MATRIX_CHUNK: u8 = 0x03;
    /// Server → client: chunk received, send the next one.
    pub const CHUNK_ACK: u8 = 0x04;
    /// Server → client: the server's OPRF values.
    pub const OUTPUTS: u8 = 0x05;
    /// Server → client: the server's OPRF values, each with its entry's label lane
    /// (suite `0x02`, [`crate::lanes`]; OT-PSI and CM20-PSI).
    pub const LABELLED_OUTPUTS: u8 = 0x06;
}

/// What the client does next. Deliberately exhaustive: a driver's loop matches on it.
#[derive(Debug)]
pub enum ClientStep {
    /// Send these bytes as the next request and pass the response to the client's
    /// `handle` ([`crate::ot::OtClient::handle`], [`crate::cm20::Cm20Client::handle`]).
    Send(Vec<u8>),
    /// The run is over.
    Done(MatchOutput),
}

/// A client of either protocol as a driver runs it ([`crate::ot::OtClient`],
/// [`crate::cm20::Cm20Client`]): a driver sends a request, may call
/// [`ChunkedClient::work_ahead`] while the response is in flight, and hands the response to
/// [`ChunkedClient::handle`].
pub trait ChunkedClient: Send {
    /// Handles a server response; returns the next request or the result.
    fn handle(&mut self, response: &[u8]) -> Result<ClientStep>;
    /// Computes now what the next `handle` can without the response in flight (the next
    /// chunk, or the client's side of the matching); the requests stay byte for byte the
    /// same. Optional; a second call before `handle` does nothing.
    fn work_ahead(&mut self) -> Result<()>;
    /// Whether [`ChunkedClient::work_ahead`] would do anything now (a driver need not
    /// start a thread for it otherwise).
    fn has_work_ahead(&self) -> bool;
    /// Whether the response awaited is the server's outputs, the last: its `handle` is
    /// the client's finish (a driver reports it as [`crate::Phase::ClientFinish`], as
    /// [`run_loop`] does).
    fn awaits_outputs(&self) -> bool;
}

/// A client just started ([`crate::Protocol::start_chunked_client`]) and the hello it
/// sends first.
pub type StartedClient = (Box<dyn ChunkedClient>, Vec<u8>);

/// A server of either protocol as a driver holds it ([`crate::ot::OtServer`],
/// [`crate::cm20::Cm20Server`]): one session's state machine, answering each request in
/// turn. A driver keeps one of these per session whatever the protocol, so adding a
/// protocol of this family adds no dispatch to it.
pub trait ChunkedServer: Send {
    /// The protocol this server runs.
    fn protocol(&self) -> crate::Protocol;
    /// Handles one client request and returns the response to send back; a malformed
    /// request or one that does not fit the phase is an error and changes nothing.
    fn handle(&mut self, request: &[u8]) -> Result<Vec<u8>>;
    /// True once the outputs have been sent.
    fn is_done(&self) -> bool;
    /// True once the run is over, successfully or not: no further message is accepted.
    fn is_finished(&self) -> bool;
    /// True when the run sent the matches' labels with its outputs (OT-PSI's and
    /// CM20-PSI's label lanes, ADR 0053): the session then needs no label step.
    fn labels_carried(&self) -> bool;
    /// The most bytes the next request can have in this phase: the hello's size before
    /// the hello, the rest of the matrix in one chunk while chunks arrive, 0 once the run
    /// is over. A driver refuses a longer request before reading it.
    fn next_request_max(&self) -> u64;
}

/// A decoded message of either protocol; each protocol names its own body types.
#[derive(Debug)]
pub(crate) enum Message<H, S, C, A, O> {
    Hello(H),
    Setup(S),
    Chunk(C),
    Ack(A),
    Outputs(O),
}

impl<H, S, C, A, O> Message<H, S, C, A, O> {
    pub(crate) fn message_type(&self) -> u8 {
        match self {
            Message::Hello(_) => message_type::HELLO,
            Message::Setup(_) => message_type::SETUP,
            Message::Chunk(_) => message_type::MATRIX_CHUNK,
            Message::Ack(_) => message_type::CHUNK_ACK,
            Message::Outputs(_) => message_type::OUTPUTS,
        }
    }
}

/// Bytes of [`SortedOutputs`]' fixed fields (one more, `Λ`, with label lanes).
pub(crate) const SORTED_OUTPUTS_FIELDS_LEN: usize = 1 + 4 + 1 + 4;

/// The outputs message of CM20-PSI and GBF-PSI: the server's values, sorted and
/// Golomb-Rice coded ([`crate::golomb`]): `output_bits` (u8), `server_items` (BE32),
/// `rice_bits` (u8), the coded length (BE32), the coded bytes. `data` borrows the
/// response bytes. With label lanes (message [`message_type::LABELLED_OUTPUTS`],
/// CM20-PSI's suite `0x02`): the lane width `Λ` (u8) after `output_bits`, and after the
/// coded bytes one lane of `1 + Λ` bytes per value, in the values' sorted order
/// ([`crate::lanes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SortedOutputs<'a> {
    pub(crate) output_bits: u8,
    pub(crate) server_items: u32,
    pub(crate) rice_bits: u8,
    pub(crate) data: &'a [u8],
    /// `Λ`, for the labelled message.
    pub(crate) lane: Option<u8>,
    /// The lanes, `server_items · (1 + Λ)` bytes (empty without lanes).
    pub(crate) lanes: &'a [u8],
}

impl<'a> SortedOutputs<'a> {
    /// The message for `values` (any order; sorted here, so that a value's position says
    /// nothing about which item it belongs to) of `output_bits` bits each, with the
    /// Golomb-Rice parameter that codes them shortest.
    pub(crate) fn encode(
        protocol: crate::Protocol,
        output_bits: u8,
        values: &mut [u128],
    ) -> Vec<u8> {
        use rayon::slice::ParallelSliceMut;
        values.par_sort_unstable();
        Self::encode_sorted(protocol, output_bits, values, None)
    }

    /// The labelled message: `rows` holds each value with its item's index (any order;
    /// sorted here), `sealed` each item's lane (`1 + width` bytes, in item order). The
    /// lanes follow the values' sorted order, so a lane's position says no more than its
    /// value's.
    pub(crate) fn encode_labelled(
        protocol: crate::Protocol,
        output_bits: u8,
        rows: &mut [(u128, u32)],
        width: u8,
        sealed: &[u8],
    ) -> Vec<u8> {
        use rayon::slice::ParallelSliceMut;
        let lane = 1 + width as usize;
        assert_eq!(sealed.len(), rows.len() * lane);
        rows.par_sort_unstable();
        let values: Zeroizing<Vec<u128>> = Zeroizing::new(rows.iter().map(|r| r.0).collect());
        let mut lanes = Vec::with_capacity(sealed.len());
        for &(_, i) in rows.iter() {
            let i = i as usize;
            lanes.extend_from_slice(&sealed[i * lane..(i + 1) * lane]);
        }
        Self::encode_sorted(protocol, output_bits, &values, Some((width, &lanes)))
    }

    fn encode_sorted(
        protocol: crate::Protocol,
        output_bits: u8,
        values: &[u128],
        lanes: Option<(u8, &[u8])>,
    ) -> Vec<u8> {
        let k = crate::golomb::best_rice_bits(values, output_bits);
        let data = crate::golomb::encode(values, output_bits, k);
        let extra = lanes.map_or(0, |(_, l)| 1 + l.len());
        let body = SORTED_OUTPUTS_FIELDS_LEN + data.len() + extra;
        let kind = match lanes {
            None => message_type::OUTPUTS,
            Some(_) => message_type::LABELLED_OUTPUTS,
        };
        let mut out = crate::wire::begin(protocol, kind, body);
        out.push(output_bits);
        out.extend(lanes.map(|(w, _)| w));
        out.extend_from_slice(&(values.len() as u32).to_be_bytes());
        out.push(k);
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        out.extend_from_slice(&data);
        if let Some((_, l)) = lanes {
            out.extend_from_slice(l);
        }
        crate::wire::finish(out)
    }

    /// Reads the message body (`labelled`: message
    /// [`message_type::LABELLED_OUTPUTS`]); at most `max_items` values.
    pub(crate) fn read(
        r: &mut Reader<'a>,
        max_items: u32,
        labelled: bool,
    ) -> Result<SortedOutputs<'a>, DecodeError> {
        let output_bits = r.u8()?;
        if !(40..=128).contains(&output_bits) {
            return Err(DecodeError::InvalidParameter {
                what: "output bits",
            });
        }
        let lane = if labelled {
            Some(crate::lanes::read_width(r)?)
        } else {
            None
        };
        let server_items = r.u32()?;
        crate::wire::check_limit("server items", server_items as u64, max_items as u64)?;
        let rice_bits = r.u8()?;
        if rice_bits > output_bits.min(crate::golomb::MAX_RICE_BITS) {
            return Err(DecodeError::InvalidParameter { what: "rice bits" });
        }
        let len = r.u32()? as usize;
        let lanes_len = lane.map_or(0, |w| server_items as usize * (1 + w as usize));
        if r.remaining() != len.saturating_add(lanes_len) {
            return Err(DecodeError::LengthMismatch {
                what: "coded outputs",
                declared: len as u64 + lanes_len as u64,
                actual: r.remaining() as u64,
            });
        }
        let data = r.take(len)?;
        let lanes = r.take(lanes_len)?;
        Ok(SortedOutputs {
            output_bits,
            server_items,
            rice_bits,
            data,
            lane,
            lanes,
        })
    }

    /// The sorted values, checked as they stream.
    pub(crate) fn values(&self) -> crate::golomb::Decoder<'a> {
        crate::golomb::Decoder::new(
            self.data,
            self.server_items as u64,
            self.output_bits,
            self.rice_bits,
        )
    }

    /// The indices of the client's items whose values are in this list: `mine` holds the
    /// client's values with their item indices, sorted by value. Sorted, each index once.
    pub(crate) fn matches(&self, mine: &[(u128, u32)]) -> Result<Zeroizing<Vec<usize>>> {
        let hits = self.hits(mine)?;
        Ok(Zeroizing::new(hits.iter().map(|h| h.item).collect()))
    }

    /// The client's items whose values are in this list, with where: `mine` holds the
    /// client's values with their item indices, sorted by value. By increasing item, each
    /// item once.
    pub(crate) fn hits(&self, mine: &[(u128, u32)]) -> Result<Zeroizing<Vec<Hit>>> {
        // Merge the two sorted lists; the server's is checked value by value as it streams.
        // At most one hit per own value; sized first, so no reallocation leaves a copy.
        let mut hits: Zeroizing<Vec<Hit>> = Zeroizing::new(Vec::with_capacity(mine.len()));
        let mut values = self.values();
        let mut k = 0;
        // The last server value and the first hit it gave: a repeat of it (two server
        // entries with one value, as likely as a false match) widens those hits' runs.
        let mut last: Option<(u128, usize)> = None;
        let mut position = 0usize;
        while let Some(v) = values.next_value()? {
            if let Some((lv, from)) = last
                && lv == v
            {
                for h in &mut hits[from..] {
                    h.count += 1;
                }
                position += 1;
                continue;
            }
            while k < mine.len() && mine[k].0 < v {
                k += 1;
            }
            // Own values equal to `v` are taken once (`k` moves past them).
            let from = hits.len();
            while k < mine.len() && mine[k].0 == v {
                hits.push(Hit {
                    item: mine[k].1 as usize,
                    position,
                    count: 1,
                });
                k += 1;
            }
            last = Some((v, from));
            position += 1;
        }
        hits.sort_unstable_by_key(|h| h.item);
        hits.dedup_by_key(|h| h.item);
        Ok(hits)
    }

    /// The lane at sorted position `i` (with lanes).
    pub(crate) fn lane_at(&self, i: usize) -> &'a [u8] {
        let len = 1 + self.lane.unwrap_or(0) as usize;
        &self.lanes[i * len..(i + 1) * len]
    }
}

/// A client item whose value the server's sorted list holds: at sorted positions
/// `position .. position + count` (`count > 1` only when server values repeat).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Hit {
    pub(crate) item: usize,
    pub(crate) position: usize,
    pub(crate) count: usize,
}

impl zeroize::DefaultIsZeroes for Hit {}

/// The expected [`SortedOutputs`] message (frame header included) for `n` uniformly random values of `l2` bits: the
/// Golomb-Rice payload with the parameter `k = max(0, l2 - bit_length(n))` (the centre of
/// [`crate::golomb::rice_candidates`]), whose gaps are close to exponential with mean
/// `μ = 2^l2 / n`, so a value costs `k + 1 + 1 / (e^(2^k / μ) - 1)` bits on average.
/// The encoder picks the best `k` for the actual values, so the real payload is at most
/// this plus the spread of a random variable (about `0.01 %` at `n = 10^5`).
pub fn sorted_outputs_expected(n: u64, l2: u32) -> u64 {
    if n == 0 {
        return (crate::wire::HEADER_LEN + SORTED_OUTPUTS_FIELDS_LEN) as u64;
    }
    let bit_length = 64 - n.leading_zeros();
    let k = l2.saturating_sub(bit_length);
    let mu = 2f64.powi(l2 as i32) / n as f64;
    let per = k as f64 + 1.0 + 1.0 / ((2f64.powi(k as i32) / mu).exp() - 1.0);
    (crate::wire::HEADER_LEN + SORTED_OUTPUTS_FIELDS_LEN) as u64
        + (n as f64 * per / 8.0).ceil() as u64
}

/// Reads the suite byte that opens both hello and setup; anything but `suite` is refused.
pub(crate) fn read_suite(r: &mut Reader<'_>, suite: u8) -> Result<(), DecodeError> {
    if r.u8()? != suite {
        return Err(DecodeError::InvalidParameter { what: "suite" });
    }
    Ok(())
}

/// Bytes of the hello's last field, the base-OT messages and their count.
pub(crate) const BASE_OT_FIELD_LEN: usize = 2 + BASE_OTS * RECEIVER_MSG_LEN;

/// Writes the hello's last field: BE16 count, then the base-OT receiver messages.
pub(crate) fn put_base_ot(out: &mut Vec<u8>, msgs: &[[u8; RECEIVER_MSG_LEN]]) {
    out.extend_from_slice(&(msgs.len() as u16).to_be_bytes());
    for m in msgs {
        out.extend_from_slice(m);
    }
}

/// Reads the field [`put_base_ot`] writes; the count must be [`BASE_OTS`].
pub(crate) fn read_base_ot(r: &mut Reader<'_>) -> Result<Vec<[u8; RECEIVER_MSG_LEN]>, DecodeError> {
    if r.u16()? as usize != BASE_OTS {
        return Err(DecodeError::InvalidParameter {
            what: "base OT count",
        });
    }
    (0..BASE_OTS).map(|_| r.array()).collect()
}

/// The server's phases: `F` is what it drew before the hello, `E` its state while
/// evaluating chunks.
pub(crate) enum ServerPhase<F, E> {
    AwaitHello(Box<F>),
    AwaitChunk(Box<E>),
    Done,
    /// An internal failure while answering the hello; no further message is accepted.
    Failed,
}

impl<F, E> ServerPhase<F, E> {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            ServerPhase::AwaitHello(_) => "server awaiting hello",
            ServerPhase::AwaitChunk(_) => "server awaiting matrix chunk",
            ServerPhase::Done => "server done",
            ServerPhase::Failed => "server failed",
        }
    }

    /// True once the outputs have been sent.
    pub(crate) fn is_done(&self) -> bool {
        matches!(self, ServerPhase::Done)
    }

    /// True once the run is over, successfully or not.
    pub(crate) fn is_finished(&self) -> bool {
        matches!(self, ServerPhase::Done | ServerPhase::Failed)
    }
}

/// The client's phases: `S` while the hello is produced in parts (OT-PSI only; CM20-PSI
/// uses [`std::convert::Infallible`]), `A` awaiting the setup, `X` while the matrix is
/// sent (awaiting an ack, then the outputs).
pub(crate) enum ClientPhase<S, A, X> {
    Starting(Box<S>),
    AwaitSetup(Box<A>),
    AwaitAck(Box<X>),
    AwaitOutputs(Box<X>),
    Done,
    /// A failure after which the run cannot continue.
    Failed,
}

impl<S, A, X> ClientPhase<S, A, X> {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            ClientPhase::Starting(_) => "client sending hello",
            ClientPhase::AwaitSetup(_) => "client awaiting setup",
            ClientPhase::AwaitAck(_) => "client awaiting chunk ack",
            ClientPhase::AwaitOutputs(_) => "client awaiting outputs",
            ClientPhase::Done => "client done",
            ClientPhase::Failed => "client failed",
        }
    }

    /// True once [`ClientStep::Done`] has been returned.
    pub(crate) fn is_done(&self) -> bool {
        matches!(self, ClientPhase::Done)
    }
}

/// `InputTooLarge` if a party's own set of `len` items is above the protocol's `limit`
/// (`what` is "client items" or "server items").
pub(crate) fn check_set_size(what: &'static str, len: usize, limit: u32) -> Result<()> {
    if len > limit as usize {
        return Err(Error::InputTooLarge {
            what,
            value: len as u64,
            limit: limit as u64,
        });
    }
    Ok(())
}

/// A party's 32-byte session nonce, the first thing either side draws.
pub(crate) fn draw_nonce<R: rand_core::CryptoRng + ?Sized>(rng: &mut R) -> [u8; 32] {
    let mut nonce = [0u8; 32];
    rng.fill_bytes(&mut nonce);
    nonce
}

/// The `Debug` output of a client or server: its type, items (their count only) and phase.
pub(crate) fn fmt_party(
    f: &mut std::fmt::Formatter<'_>,
    name: &str,
    items: &crate::ItemSet,
    phase: &'static str,
) -> std::fmt::Result {
    f.debug_struct(name)
        .field("items", items)
        .field("phase", &phase)
        .finish_non_exhaustive()
}

/// The error for a message of type `message` that the phase named `phase` does not take.
pub(crate) fn wrong_phase(phase: &'static str, message: u8) -> Error {
    Error::WrongPhase { phase, message }
}

/// The check of a chunk of `count` instances from `first` against the receiver's `next`
/// instance and the run's `total` (GBF-PSI's server, group PSI's member): `InvalidParameter`
/// "first instance" if it starts elsewhere, "chunk instances" if it runs past the end.
pub(crate) fn check_chunk_range(
    first: usize,
    count: usize,
    next: usize,
    total: usize,
) -> Result<(), DecodeError> {
    if first != next {
        return Err(DecodeError::InvalidParameter {
            what: "first instance",
        });
    }
    if first + count > total {
        return Err(DecodeError::InvalidParameter {
            what: "chunk instances",
        });
    }
    Ok(())
}

/// The server's checks of the set size a hello declares against its configuration:
/// exactly `expected` if set (a server that admitted and charged a session for `n` items
/// pins `n`), and at most `max`.
pub(crate) fn admit_client_items(declared: u32, expected: Option<usize>, max: usize) -> Result<()> {
    if let Some(expected) = expected
        && declared as usize != expected
    {
        return Err(Error::CountMismatch {
            expected: expected as u64,
            found: declared as u64,
        });
    }
    if declared as usize > max {
        return Err(DecodeError::LimitExceeded {
            what: "client items",
            value: declared as u64,
            limit: max as u64,
        }
        .into());
    }
    Ok(())
}

/// Traffic counted by [`run_loop`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Traffic {
    pub(crate) round_trips: usize,
    pub(crate) client_to_server_bytes: u64,
    pub(crate) server_to_client_bytes: u64,
}

/// The in-memory run after the client's hello: hands each request to `server` (which
/// returns its response and whether it is done) and each response to `client`, until the
/// client is done, calling `observe` after each step with its [`Phase`].
pub(crate) fn run_loop(
    mut request: Vec<u8>,
    mut server: impl FnMut(&[u8]) -> Result<(Vec<u8>, bool)>,
    mut client: impl FnMut(&[u8]) -> Result<ClientStep>,
    mut observe: impl FnMut(Phase),
) -> Result<(MatchOutput, Traffic)> {
    let mut traffic = Traffic::default();
    let mut first = true;
    loop {
        traffic.client_to_server_bytes += request.len() as u64;
        traffic.round_trips += 1;
        let (response, server_done) = server(&request)?;
        observe(if first {
            Phase::ServerHello
        } else if server_done {
            Phase::ServerOutputs
        } else {
            Phase::ServerChunk
        });
        traffic.server_to_client_bytes += response.len() as u64;
        let step = client(&response)?;
        observe(match (&step, first) {
            (ClientStep::Done(_), _) => Phase::ClientFinish,
            (_, true) => Phase::ClientSetup,
            _ => Phase::ClientChunk,
        });
        first = false;
        match step {
            ClientStep::Send(next) => request = next,
            ClientStep::Done(output) => return Ok((output, traffic)),
        }
    }
}

/// Test helper: every request of a run and the matched indices, the client calling
/// `work_ahead` twice after each request (before the server sees it) if `ahead`.
#[cfg(test)]
pub(crate) fn requests_of_run(
    mut client: impl ChunkedClient,
    mut request: Vec<u8>,
    mut server: impl FnMut(&[u8]) -> Vec<u8>,
    ahead: bool,
) -> (Vec<Vec<u8>>, Vec<usize>) {
    let mut sent = Vec::new();
    loop {
        sent.push(request.clone());
        if ahead {
            client.work_ahead().unwrap();
            client.work_ahead().unwrap();
        }
        let response = server(&request);
        match client.handle(&response).unwrap() {
            ClientStep::Send(next) => request = next,
            ClientStep::Done(out) => {
                return (sent, out.matches.iter().map(|m| m.index).collect());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission() {
        assert!(admit_client_items(5, None, 5).is_ok());
        assert!(admit_client_items(5, Some(5), 5).is_ok());
        assert_eq!(
            admit_client_items(4, Some(5), 5).unwrap_err(),
            Error::CountMismatch {
                expected: 5,
                found: 4
            }
        );
        assert!(matches!(
            admit_client_items(6, None, 5),
            Err(Error::Decode(DecodeError::LimitExceeded { value: 6, .. }))
        ));
    }

    #[test]
    fn phase_names_and_message_types() {
        let p: ServerPhase<(), ()> = ServerPhase::Failed;
        assert!(p.is_finished() && !p.is_done());
        assert_eq!(p.name(), "server failed");
        let c: ClientPhase<(), (), ()> = ClientPhase::AwaitAck(Box::new(()));
        assert_eq!(c.name(), "client awaiting chunk ack");
        assert!(!c.is_done());
        let m: Message<(), (), (), (), ()> = Message::Outputs(());
        assert_eq!(m.message_type(), message_type::OUTPUTS);
    }
}
