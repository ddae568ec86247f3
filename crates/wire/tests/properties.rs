//! Property tests: random messages round-trip, and no input — random bytes or valid
//! frames with random bytes flipped, inserted or deleted — makes a decoder panic. Any
//! input that does decode must re-encode to exactly itself (one encoding per message).

use proptest::collection::vec;
use proptest::prelude::*;
use ramstore_wire::*;

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..300)
}

fn text() -> impl Strategy<Value = String> {
    "\\PC{0,24}"
}

fn rules() -> impl Strategy<Value = RejectRules> {
    (any::<u64>(), 0u8..32)
        .prop_map(|(v, bits)| RejectRules::from_parts(v, bits).expect("known bits"))
}

fn status() -> impl Strategy<Value = Status> {
    (0..Status::ALL.len()).prop_map(|i| Status::ALL[i])
}

fn error_status() -> impl Strategy<Value = Status> {
    (1..Status::ALL.len()).prop_map(|i| Status::ALL[i])
}

fn opcode() -> impl Strategy<Value = Opcode> {
    (0..Opcode::ALL.len()).prop_map(|i| Opcode::ALL[i])
}

fn kind() -> impl Strategy<Value = NumberKind> {
    prop_oneof![Just(NumberKind::I64), Just(NumberKind::F64)]
}

fn server_status() -> impl Strategy<Value = ServerStatus> {
    prop_oneof![
        Just(ServerStatus::Up),
        Just(ServerStatus::Crashed),
        Just(ServerStatus::Removed)
    ]
}

/// A failure domain name: at most 16 characters of at most 4 bytes each, so always
/// within `MAX_FAILURE_DOMAIN_BYTES`.
fn domain() -> impl Strategy<Value = String> {
    "\\PC{0,16}"
}

fn services() -> impl Strategy<Value = Services> {
    (0u32..4).prop_map(|b| Services::from_bits(b).expect("known bits"))
}

fn backup_flags() -> impl Strategy<Value = BackupWriteFlags> {
    (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()).prop_map(
        |(open, close, atomic, reserve)| BackupWriteFlags {
            open,
            close,
            atomic: atomic && open,
            reserve: reserve && open,
        },
    )
}

fn encode_req(id: u64, req: &Request<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_request(id, req, &mut out).expect("encodes");
    out
}

fn encode_resp(id: u64, op: Opcode, resp: &Response<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_response(id, op, resp, &mut out).expect("encodes");
    out
}

/// Walks every list of a decoded message, so iteration is exercised on every input.
fn walk_request(req: &Request<'_>) {
    match req {
        Request::MultiRead(l) => assert_eq!(l.iter().count(), l.len()),
        Request::MultiWrite(l, _) => assert_eq!(l.iter().count(), l.len()),
        Request::MultiRemove(l, _) => assert_eq!(l.iter().count(), l.len()),
        Request::ServerListUpdate { servers, .. } => {
            assert_eq!(servers.iter().count(), servers.len())
        }
        _ => {}
    }
}

fn walk_response(resp: &Response<'_>) {
    match resp {
        Response::MultiRead(l) => assert_eq!(l.iter().count(), l.len()),
        Response::MultiWrite(l) => assert_eq!(l.iter().count(), l.len()),
        Response::MultiRemove(l) => assert_eq!(l.iter().count(), l.len()),
        Response::Enumerate { objects, .. } => assert_eq!(objects.iter().count(), objects.len()),
        Response::GetTabletMap { tablets, .. } => {
            assert_eq!(tablets.iter().count(), tablets.len())
        }
        Response::BackupGetReplicas { replicas } => {
            assert_eq!(replicas.iter().count(), replicas.len())
        }
        _ => {}
    }
}

/// Feeds `input` to every decoder; whatever decodes must re-encode to itself.
fn check_any_input(input: &[u8]) {
    let _ = frame_len(input);
    let _ = decode_raw_header(input);
    let _ = decode_header(input);
    if let Ok((h, req)) = decode_request(input) {
        walk_request(&req);
        assert_eq!(encode_req(h.request_id, &req), input);
    }
    if let Ok((h, resp)) = decode_response(input) {
        walk_response(&resp);
        assert_eq!(encode_resp(h.request_id, h.opcode, &resp), input);
    }
}

/// A random valid frame: any request or response, lists included.
fn frame() -> impl Strategy<Value = Vec<u8>> {
    let id = any::<u64>();
    prop_oneof![
        (id, any::<u64>()).prop_map(|(id, nonce)| encode_req(
            id,
            &Request::Ping {
                nonce,
                caller_id: nonce.rotate_left(7)
            }
        )),
        (id, any::<u64>(), rules(), bytes(), bytes()).prop_map(|(id, t, r, k, v)| encode_req(
            id,
            &Request::Write {
                table_id: t,
                rules: r,
                key: &k,
                value: &v,
                rpc_id: None,
            }
        )),
        (id, any::<u64>(), rules(), kind(), any::<[u8; 8]>(), bytes()).prop_map(
            |(id, t, r, kind, delta, k)| encode_req(
                id,
                &Request::Increment {
                    table_id: t,
                    rules: r,
                    kind,
                    delta,
                    key: &k,
                    rpc_id: None,
                }
            )
        ),
        (id, any::<u32>(), text()).prop_map(|(id, span, name)| encode_req(
            id,
            &Request::CreateTable {
                server_span: span,
                name: &name
            }
        )),
        (
            id,
            any::<u64>(),
            services(),
            any::<u64>(),
            any::<u32>(),
            text(),
            domain()
        )
            .prop_map(|(id, r, s, m, mbps, a, d)| {
                encode_req(
                    id,
                    &Request::Enlist {
                        replaces_server_id: r,
                        services: s,
                        memory_bytes: m,
                        backup_read_mbps: mbps,
                        address: &a,
                        failure_domain: &d,
                    },
                )
            }),
        (id, multi_write_items()).prop_map(|(id, items)| multi_write_frame(id, &items)),
        (id, multi_read_items()).prop_map(|(id, items)| multi_read_frame(id, &items)),
        (id, any::<u64>(), server_list()).prop_map(|(id, v, s)| server_list_frame(id, v, &s)),
        (id, any::<u64>(), bytes()).prop_map(|(id, version, v)| encode_resp(
            id,
            Opcode::Read,
            &Response::Read { version, value: &v }
        )),
        (id, opcode(), error_body()).prop_map(|(id, op, (s, n, m))| encode_resp(
            id,
            op,
            &Response::Error(make_error(s, n, &m))
        )),
        (id, multi_read_results()).prop_map(|(id, r)| multi_read_response_frame(id, &r)),
        (id, enumerated(), any::<bool>(), any::<u64>())
            .prop_map(|(id, o, h, c)| enumerate_frame(id, &o, h, c)),
        (id, any::<u64>(), tablets()).prop_map(|(id, v, t)| tablet_map_frame(id, v, &t)),
        (id, text()).prop_map(|(id, t)| encode_resp(
            id,
            Opcode::GetServerStats,
            &Response::GetServerStats { text: &t }
        )),
        (
            id,
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
            backup_flags(),
            bytes()
        )
            .prop_map(|(id, m, seg, offset, flags, b)| encode_req(
                id,
                &Request::BackupWrite {
                    master_id: m,
                    segment_id: seg,
                    offset,
                    flags,
                    bytes: &b
                }
            )),
        (id, any::<u64>(), any::<u64>(), any::<u8>()).prop_map(|(id, m, seg, which)| encode_req(
            id,
            &match which % 3 {
                0 => Request::BackupFree {
                    master_id: m,
                    segment_id: seg,
                },
                1 => Request::BackupGetReplicas { master_id: m },
                _ => Request::BackupReadReplica {
                    master_id: m,
                    segment_id: seg,
                },
            }
        )),
        (id, any::<bool>(), bytes()).prop_map(|(id, closed, b)| encode_resp(
            id,
            Opcode::BackupReadReplica,
            &Response::BackupReadReplica { closed, bytes: &b }
        )),
        (id, replica_list()).prop_map(|(id, r)| replicas_frame(id, &r)),
    ]
}

type ReplicasOwned = Vec<(u64, u32, bool)>;

fn replica_list() -> impl Strategy<Value = ReplicasOwned> {
    vec((any::<u64>(), any::<u32>(), any::<bool>()), 0..20)
}

fn replicas_frame(id: u64, replicas: &ReplicasOwned) -> Vec<u8> {
    let mut out = Vec::new();
    let mut e = BackupReplicasEncoder::new(id, &mut out);
    for (seg, len, closed) in replicas {
        e.push(*seg, *len, *closed).expect("push");
    }
    e.finish().expect("finish");
    out
}

type MultiWriteOwned = Vec<(u64, RejectRules, Vec<u8>, Vec<u8>)>;

fn multi_write_items() -> impl Strategy<Value = MultiWriteOwned> {
    vec((any::<u64>(), rules(), bytes(), bytes()), 0..20)
}

fn multi_write_frame(id: u64, items: &MultiWriteOwned) -> Vec<u8> {
    let mut out = Vec::new();
    let mut e = MultiWriteRequestEncoder::new(id, &mut out);
    for (t, r, k, v) in items {
        e.push(*t, *r, k, v).expect("push");
    }
    e.finish().expect("finish");
    out
}

fn multi_read_items() -> impl Strategy<Value = Vec<(u64, Vec<u8>)>> {
    vec((any::<u64>(), bytes()), 0..20)
}

fn multi_read_frame(id: u64, items: &[(u64, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut e = MultiReadRequestEncoder::new(id, &mut out);
    for (t, k) in items {
        e.push(*t, k).expect("push");
    }
    e.finish().expect("finish");
    out
}

type ServerListOwned = Vec<(u64, ServerStatus, Services, u32, String, String)>;

fn server_list() -> impl Strategy<Value = ServerListOwned> {
    vec(
        (
            any::<u64>(),
            server_status(),
            services(),
            any::<u32>(),
            text(),
            domain(),
        ),
        0..20,
    )
}

fn server_list_frame(id: u64, version: u64, servers: &ServerListOwned) -> Vec<u8> {
    let mut out = Vec::new();
    let mut e = ServerListUpdateEncoder::new(id, version, &mut out);
    for (sid, st, sv, mbps, a, d) in servers {
        e.push(&ServerListEntry {
            server_id: *sid,
            status: *st,
            services: *sv,
            backup_read_mbps: *mbps,
            address: a,
            failure_domain: d,
        })
        .expect("push");
    }
    e.finish().expect("finish");
    out
}

/// (status, version, value): the value is used only when the status is OK.
type MultiReadResultsOwned = Vec<(Status, u64, Vec<u8>)>;

fn multi_read_results() -> impl Strategy<Value = MultiReadResultsOwned> {
    vec((status(), any::<u64>(), bytes()), 0..20)
}

fn multi_read_response_frame(id: u64, results: &MultiReadResultsOwned) -> Vec<u8> {
    let mut out = Vec::new();
    let mut e = MultiReadResponseEncoder::new(id, &mut out);
    for (s, version, v) in results {
        if *s == Status::Ok {
            e.push_ok(*version, v).expect("push");
        } else {
            e.push_error(*s).expect("push");
        }
    }
    e.finish().expect("finish");
    out
}

type EnumeratedOwned = Vec<(u64, Vec<u8>, Vec<u8>)>;

fn enumerated() -> impl Strategy<Value = EnumeratedOwned> {
    vec((any::<u64>(), bytes(), bytes()), 0..20)
}

fn enumerate_frame(id: u64, objects: &EnumeratedOwned, has_next: bool, cursor: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut e = EnumerateResponseEncoder::new(id, &mut out);
    for (version, k, v) in objects {
        e.push(*version, k, v).expect("push");
    }
    e.finish(has_next, cursor).expect("finish");
    out
}

type TabletsOwned = Vec<(u64, u64, u64, u64, String)>;

fn tablets() -> impl Strategy<Value = TabletsOwned> {
    vec(
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            text(),
        ),
        0..20,
    )
}

fn tablet_map_frame(id: u64, version: u64, tablets: &TabletsOwned) -> Vec<u8> {
    let mut out = Vec::new();
    let mut e = TabletMapEncoder::new(id, version, &mut out);
    for (t, s, end, sid, a) in tablets {
        e.push(*t, *s, *end, *sid, a).expect("push");
    }
    e.finish().expect("finish");
    out
}

/// (status, number, message) from which [`make_error`] builds the body its status
/// calls for.
fn error_body() -> impl Strategy<Value = (Status, u64, String)> {
    (error_status(), any::<u64>(), text())
}

fn make_error(status: Status, n: u64, message: &str) -> ErrorBody<'_> {
    match status {
        Status::WrongVersion => ErrorBody::WrongVersion { current_version: n },
        Status::Retry => ErrorBody::Retry { delay_ms: n as u32 },
        _ => ErrorBody::Message { status, message },
    }
}

/// One edit of a frame: flip bits of a byte, insert a byte, or delete a byte.
#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, u8),
    Delete(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..).prop_map(|(i, m)| Mutation::Flip(i, m)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<usize>().prop_map(Mutation::Delete),
    ]
}

fn mutate(frame: &mut Vec<u8>, m: &Mutation) {
    match *m {
        Mutation::Flip(i, mask) if !frame.is_empty() => {
            let i = i % frame.len();
            frame[i] ^= mask;
        }
        Mutation::Insert(i, b) => {
            let i = i % (frame.len() + 1);
            frame.insert(i, b);
        }
        Mutation::Delete(i) if !frame.is_empty() => {
            let i = i % frame.len();
            frame.remove(i);
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(input in vec(any::<u8>(), 0..512)) {
        check_any_input(&input);
    }

    /// Arbitrary bytes behind a plausible length prefix and header, so the body
    /// decoders (not just the prefix check) see random input.
    #[test]
    fn arbitrary_bodies_never_panic(
        // Past the highest code (codes have a gap), so every body decoder is hit.
        op in 0u16..(Opcode::ALL[Opcode::ALL.len() - 1].code() + 3),
        status in 0u16..(Status::ALL.len() as u16 + 1),
        response in any::<bool>(),
        body in vec(any::<u8>(), 0..512),
    ) {
        let mut frame = Vec::new();
        frame.extend_from_slice(&(16 + body.len() as u32).to_le_bytes());
        frame.extend_from_slice(&op.to_le_bytes());
        frame.extend_from_slice(&status.to_le_bytes());
        frame.extend_from_slice(&u32::from(response).to_le_bytes());
        frame.extend_from_slice(&7u64.to_le_bytes());
        frame.extend_from_slice(&body);
        check_any_input(&frame);
    }

    #[test]
    fn mutated_frames_never_panic(
        mut frame in frame(),
        mutations in vec(mutation(), 1..8),
        fix_len in any::<bool>(),
    ) {
        for m in &mutations {
            mutate(&mut frame, m);
        }
        // Half the time make the prefix agree with the mutated length, so the
        // mutation reaches the body decoders instead of failing the length check.
        if fix_len && frame.len() >= 4 {
            let len = frame.len() as u32 - 4;
            frame[..4].copy_from_slice(&len.to_le_bytes());
        }
        check_any_input(&frame);
    }

    #[test]
    fn valid_frames_round_trip_and_every_cut_fails(frame in frame()) {
        check_any_input(&frame);
        let decodes = decode_request(&frame).is_ok() || decode_response(&frame).is_ok();
        prop_assert!(decodes);
        for cut in 0..frame.len() {
            prop_assert!(decode_request(&frame[..cut]).is_err());
            prop_assert!(decode_response(&frame[..cut]).is_err());
        }
    }

    #[test]
    fn object_requests_round_trip(
        id in any::<u64>(),
        table_id in any::<u64>(),
        r in rules(),
        key in bytes(),
        value in bytes(),
        kind in kind(),
        delta in any::<[u8; 8]>(),
    ) {
        for req in [
            Request::Read { table_id, rules: r, key: &key },
            Request::Write { table_id, rules: r, key: &key, value: &value, rpc_id: None },
            Request::Remove { table_id, rules: r, key: &key, rpc_id: None },
            Request::Increment { table_id, rules: r, kind, delta, key: &key, rpc_id: None },
        ] {
            let frame = encode_req(id, &req);
            let (h, decoded) = decode_request(&frame).expect("decodes");
            prop_assert_eq!(h.request_id, id);
            prop_assert_eq!(decoded, req);
        }
    }

    #[test]
    fn string_requests_round_trip(
        name in text(),
        address in text(),
        n in any::<u64>(),
        span in any::<u32>(),
        s in services(),
        domain in domain(),
    ) {
        for req in [
            Request::CreateTable { server_span: span, name: &name },
            Request::GetTableId { name: &name },
            Request::DropTable { name: &name },
            Request::SplitTablet { name: &name, split_hash: n },
            Request::Enlist {
                replaces_server_id: n,
                services: s,
                memory_bytes: n,
                backup_read_mbps: span,
                address: &address,
                failure_domain: &domain,
            },
        ] {
            let frame = encode_req(1, &req);
            prop_assert_eq!(decode_request(&frame).expect("decodes").1, req);
        }
    }

    #[test]
    fn object_responses_round_trip(
        version in any::<u64>(),
        value in bytes(),
        existed in any::<bool>(),
        number in any::<[u8; 8]>(),
        (s, n, m) in error_body(),
        op in opcode(),
    ) {
        for (op, resp) in [
            (Opcode::Read, Response::Read { version, value: &value }),
            (Opcode::Write, Response::Write { version }),
            (Opcode::Remove, Response::Remove { existed, version }),
            (Opcode::Increment, Response::Increment { version, value: number }),
            (op, Response::Error(make_error(s, n, &m))),
        ] {
            let frame = encode_resp(3, op, &resp);
            let (h, decoded) = decode_response(&frame).expect("decodes");
            prop_assert_eq!((h.opcode, h.status), (op, resp.status()));
            prop_assert_eq!(decoded, resp);
        }
    }

    #[test]
    fn backup_messages_round_trip(
        master_id in any::<u64>(),
        segment_id in any::<u64>(),
        offset in any::<u32>(),
        flags in backup_flags(),
        b in bytes(),
        closed in any::<bool>(),
        replicas in replica_list(),
    ) {
        for req in [
            Request::BackupWrite { master_id, segment_id, offset, flags, bytes: &b },
            Request::BackupFree { master_id, segment_id },
            Request::BackupGetReplicas { master_id },
            Request::BackupReadReplica { master_id, segment_id },
        ] {
            let frame = encode_req(1, &req);
            prop_assert_eq!(decode_request(&frame).expect("decodes").1, req);
        }
        for (op, resp) in [
            (Opcode::BackupWrite, Response::BackupWrite),
            (Opcode::BackupFree, Response::BackupFree),
            (Opcode::BackupReadReplica, Response::BackupReadReplica { closed, bytes: &b }),
        ] {
            let frame = encode_resp(1, op, &resp);
            prop_assert_eq!(decode_response(&frame).expect("decodes").1, resp);
        }
        let frame = replicas_frame(1, &replicas);
        let (_, Response::BackupGetReplicas { replicas: list }) =
            decode_response(&frame).expect("decodes") else {
            panic!("not a BackupGetReplicas");
        };
        let got: Vec<_> = list.iter().map(|r| (r.segment_id, r.length, r.closed)).collect();
        prop_assert_eq!(got, replicas);
    }

    #[test]
    fn multi_write_round_trips(items in multi_write_items()) {
        let frame = multi_write_frame(1, &items);
        let (_, Request::MultiWrite(list, None)) = decode_request(&frame).expect("decodes") else {
            panic!("not a MultiWrite");
        };
        let got: Vec<_> = list.iter().map(|i| (i.table_id, i.rules, i.key.to_vec(), i.value.to_vec())).collect();
        prop_assert_eq!(got, items);
    }

    #[test]
    fn multi_read_round_trips(items in multi_read_items()) {
        let frame = multi_read_frame(1, &items);
        let (_, Request::MultiRead(list)) = decode_request(&frame).expect("decodes") else {
            panic!("not a MultiRead");
        };
        let got: Vec<_> = list.iter().map(|i| (i.table_id, i.key.to_vec())).collect();
        prop_assert_eq!(got, items);
    }

    #[test]
    fn multi_remove_round_trips(items in vec((any::<u64>(), rules(), bytes()), 0..20)) {
        let mut frame = Vec::new();
        let mut e = MultiRemoveRequestEncoder::new(1, &mut frame);
        for (t, r, k) in &items {
            e.push(*t, *r, k).expect("push");
        }
        e.finish().expect("finish");
        let (_, Request::MultiRemove(list, None)) = decode_request(&frame).expect("decodes") else {
            panic!("not a MultiRemove");
        };
        let got: Vec<_> = list.iter().map(|i| (i.table_id, i.rules, i.key.to_vec())).collect();
        prop_assert_eq!(got, items);
    }

    #[test]
    fn server_list_round_trips(version in any::<u64>(), servers in server_list()) {
        let frame = server_list_frame(1, version, &servers);
        let (_, Request::ServerListUpdate { list_version, servers: list }) =
            decode_request(&frame).expect("decodes") else {
            panic!("not a ServerListUpdate");
        };
        prop_assert_eq!(list_version, version);
        let got: Vec<_> = list
            .iter()
            .map(|s| {
                (
                    s.server_id,
                    s.status,
                    s.services,
                    s.backup_read_mbps,
                    s.address.to_string(),
                    s.failure_domain.to_string(),
                )
            })
            .collect();
        prop_assert_eq!(got, servers);
    }

    #[test]
    fn multi_responses_round_trip(
        reads in multi_read_results(),
        writes in vec((status(), any::<u64>()), 0..20),
        removes in vec((status(), any::<bool>(), any::<u64>()), 0..20),
    ) {
        let frame = multi_read_response_frame(1, &reads);
        let (_, Response::MultiRead(list)) = decode_response(&frame).expect("decodes") else {
            panic!("not a MultiRead");
        };
        let expected: Vec<_> = reads
            .iter()
            .map(|(s, v, val)| if *s == Status::Ok { (*s, *v, val.clone()) } else { (*s, 0, Vec::new()) })
            .collect();
        let got: Vec<_> = list.iter().map(|r| (r.status, r.version, r.value.to_vec())).collect();
        prop_assert_eq!(got, expected);

        let mut frame = Vec::new();
        let mut e = MultiWriteResponseEncoder::new(1, &mut frame);
        for (s, v) in &writes {
            e.push(*s, *v).expect("push");
        }
        e.finish().expect("finish");
        let (_, Response::MultiWrite(list)) = decode_response(&frame).expect("decodes") else {
            panic!("not a MultiWrite");
        };
        let got: Vec<_> = list.iter().map(|r| (r.status, r.version)).collect();
        prop_assert_eq!(got, writes);

        let mut frame = Vec::new();
        let mut e = MultiRemoveResponseEncoder::new(1, &mut frame);
        for (s, x, v) in &removes {
            e.push(*s, *x, *v).expect("push");
        }
        e.finish().expect("finish");
        let (_, Response::MultiRemove(list)) = decode_response(&frame).expect("decodes") else {
            panic!("not a MultiRemove");
        };
        let got: Vec<_> = list.iter().map(|r| (r.status, r.existed, r.version)).collect();
        prop_assert_eq!(got, removes);
    }

    #[test]
    fn enumerate_and_tablet_map_round_trip(
        objects in enumerated(),
        has_next in any::<bool>(),
        cursor in any::<u64>(),
        version in any::<u64>(),
        tablets in tablets(),
    ) {
        let frame = enumerate_frame(1, &objects, has_next, cursor);
        let (_, Response::Enumerate { has_next: h, next_cursor, objects: list }) =
            decode_response(&frame).expect("decodes") else {
            panic!("not an Enumerate");
        };
        prop_assert_eq!((h, next_cursor), (has_next, cursor));
        let got: Vec<_> = list.iter().map(|o| (o.version, o.key.to_vec(), o.value.to_vec())).collect();
        prop_assert_eq!(got, objects);

        let frame = tablet_map_frame(1, version, &tablets);
        let (_, Response::GetTabletMap { map_version, tablets: list }) =
            decode_response(&frame).expect("decodes") else {
            panic!("not a GetTabletMap");
        };
        prop_assert_eq!(map_version, version);
        let got: Vec<_> = list
            .iter()
            .map(|t| (t.table_id, t.start_hash, t.end_hash, t.server_id, t.address.to_string()))
            .collect();
        prop_assert_eq!(got, tablets);
    }
}
