//! Round trips of every request and response (including every error status), and the
//! error cases a peer can provoke: truncation, oversize fields, unknown opcodes,
//! wrong direction, trailing bytes.

mod common;

use common::*;
use ramstore_wire::*;

#[test]
fn every_simple_request_round_trips() {
    for (name, req) in simple_requests() {
        let frame = request_frame(&req);
        assert_eq!(frame_len(&frame), Ok(Some(frame.len())), "{name}");
        let (header, decoded) = decode_request(&frame).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(header.opcode, req.opcode(), "{name}");
        assert_eq!(header.status, Status::Ok);
        assert_eq!(header.request_id, ID);
        assert!(!header.is_response());
        assert_eq!(decoded, req, "{name}");
    }
}

#[test]
fn every_simple_response_round_trips() {
    for (name, op, resp) in simple_responses() {
        let frame = response_frame(op, &resp);
        let (header, decoded) = decode_response(&frame).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(header.opcode, op, "{name}");
        assert_eq!(header.status, resp.status(), "{name}");
        assert!(header.is_response());
        assert_eq!(decoded, resp, "{name}");
    }
}

#[test]
fn every_error_status_round_trips_under_every_opcode() {
    for op in Opcode::ALL {
        for status in Status::ALL.into_iter().filter(|s| *s != Status::Ok) {
            let body = match status {
                Status::WrongVersion => ErrorBody::WrongVersion {
                    current_version: 77,
                },
                Status::Retry => ErrorBody::Retry { delay_ms: 5 },
                _ => ErrorBody::Message {
                    status,
                    message: "why ✓",
                },
            };
            let resp = Response::Error(body);
            let frame = response_frame(op, &resp);
            let (header, decoded) = decode_response(&frame).expect("decodes");
            assert_eq!((header.opcode, header.status), (op, status));
            assert_eq!(decoded, resp);
        }
    }
}

#[test]
fn multi_op_requests_round_trip_item_by_item() {
    let frames = list_request_frames();
    let get = |name: &str| {
        frames
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| f.clone())
            .expect("sample")
    };

    let frame = get("multi_read_request");
    let (_, Request::MultiRead(items)) = decode_request(&frame).expect("decodes") else {
        panic!("not a MultiRead");
    };
    assert_eq!(items.len(), MULTI_READ.len());
    let got: Vec<_> = items.iter().map(|i| (i.table_id, i.key)).collect();
    assert_eq!(got, MULTI_READ.to_vec());

    let frame = get("multi_write_request");
    let (_, Request::MultiWrite(items, None)) = decode_request(&frame).expect("decodes") else {
        panic!("not a MultiWrite");
    };
    let got: Vec<_> = items
        .iter()
        .map(|i| (i.table_id, i.rules, i.key, i.value))
        .collect();
    assert_eq!(got, multi_write());

    let frame = get("multi_remove_request");
    let (_, Request::MultiRemove(items, None)) = decode_request(&frame).expect("decodes") else {
        panic!("not a MultiRemove");
    };
    let got: Vec<_> = items.iter().map(|i| (i.table_id, i.rules, i.key)).collect();
    assert_eq!(got, multi_remove());

    let frame = get("server_list_update_request");
    let (
        _,
        Request::ServerListUpdate {
            list_version,
            servers,
        },
    ) = decode_request(&frame).expect("decodes")
    else {
        panic!("not a ServerListUpdate");
    };
    assert_eq!(list_version, SERVER_LIST_VERSION);
    let got: Vec<_> = servers.iter().collect();
    assert_eq!(got, server_list());

    let frame = get("multi_read_empty_request");
    let (_, Request::MultiRead(items)) = decode_request(&frame).expect("decodes") else {
        panic!("not a MultiRead");
    };
    assert!(items.is_empty());
    assert_eq!(items.iter().count(), 0);

    // Re-encoding a decoded list request gives back the frame.
    for (name, frame) in &frames {
        let (_, req) = decode_request(frame).expect("decodes");
        let mut out = Vec::new();
        encode_request(ID, &req, &mut out).expect("re-encodes");
        assert_eq!(&out, frame, "{name}");
    }
}

#[test]
fn list_responses_round_trip_item_by_item() {
    let frames = other_response_frames();
    let get = |name: &str| {
        frames
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, f)| f.clone())
            .expect("sample")
    };

    let frame = get("multi_read_response");
    let (_, Response::MultiRead(results)) = decode_response(&frame).expect("decodes") else {
        panic!("not a MultiRead");
    };
    let got: Vec<_> = results.iter().collect();
    assert_eq!(
        got,
        vec![
            MultiReadResult {
                status: Status::Ok,
                version: 6,
                value: b"x"
            },
            MultiReadResult {
                status: Status::ObjectDoesntExist,
                version: 0,
                value: b""
            },
        ]
    );

    let frame = get("multi_write_response");
    let (_, Response::MultiWrite(results)) = decode_response(&frame).expect("decodes") else {
        panic!("not a MultiWrite");
    };
    let got: Vec<_> = results.iter().map(|r| (r.status, r.version)).collect();
    assert_eq!(got, vec![(Status::Ok, 6), (Status::WrongVersion, 9)]);

    let frame = get("multi_remove_response");
    let (_, Response::MultiRemove(results)) = decode_response(&frame).expect("decodes") else {
        panic!("not a MultiRemove");
    };
    let got: Vec<_> = results
        .iter()
        .map(|r| (r.status, r.existed, r.version))
        .collect();
    assert_eq!(
        got,
        vec![(Status::Ok, true, 6), (Status::ObjectDoesntExist, false, 0)]
    );

    let frame = get("enumerate_response");
    let (
        _,
        Response::Enumerate {
            has_next,
            next_cursor,
            objects,
        },
    ) = decode_response(&frame).expect("decodes")
    else {
        panic!("not an Enumerate");
    };
    assert!(has_next);
    assert_eq!(next_cursor, ENUMERATE_NEXT_CURSOR);
    let got: Vec<_> = objects
        .iter()
        .map(|o| (o.version, o.key, o.value))
        .collect();
    assert_eq!(got, enumerated());

    for name in [
        "pull_response_with_records",
        "priority_pull_response_with_records",
    ] {
        let frame = get(name);
        let (objects, records) = match decode_response(&frame).expect("decodes").1 {
            Response::Pull {
                objects, records, ..
            } => (objects, records),
            Response::PriorityPull { objects, records } => (objects, records),
            other => panic!("{name}: {other:?}"),
        };
        let got: Vec<_> = objects
            .iter()
            .map(|o| (o.version, o.key, o.value))
            .collect();
        assert_eq!(got, enumerated(), "{name}");
        assert_eq!(
            records.iter().collect::<Vec<_>>(),
            moved_records(),
            "{name}"
        );
    }
    // Held commits (issue 21): after records, and alone behind an empty
    // records count; both decode to the lists encoded.
    let participants = held_participants();
    for (name, want_records) in [
        ("pull_response_with_records_and_held", moved_records()),
        ("pull_response_with_held", Vec::new()),
    ] {
        let frame = get(name);
        let Response::Pull { records, held, .. } = decode_response(&frame).expect("decodes").1
        else {
            panic!("{name}: not a Pull answer");
        };
        assert_eq!(records.iter().collect::<Vec<_>>(), want_records, "{name}");
        let got: Vec<_> = held
            .iter()
            .map(|h| {
                (
                    h.lease_id,
                    h.tx_seq,
                    h.participants.iter().collect::<Vec<_>>(),
                )
            })
            .collect();
        let want: Vec<_> = held_commits(&participants)
            .iter()
            .map(|h| (h.lease_id, h.tx_seq, h.participants.to_vec()))
            .collect();
        assert_eq!(got, want, "{name}");
        // Re-encoding the decoded answer gives the same bytes (one encoding).
        let (header, response) = decode_response(&frame).expect("decodes");
        let mut again = Vec::new();
        encode_response(header.request_id, Opcode::Pull, &response, &mut again).expect("encodes");
        assert_eq!(again, frame, "{name}");
    }
    // One encoding per answer: an empty records list with nothing after it,
    // or an empty held list, is refused.
    let plain = get("pull_response");
    for (tail, what) in [(&[0u8; 4][..], "records"), (&[0u8; 8][..], "held commits")] {
        let mut frame = plain.clone();
        frame.extend_from_slice(tail);
        let len = u32::try_from(frame.len() - 4).expect("small frame");
        frame[..4].copy_from_slice(&len.to_le_bytes());
        assert!(
            matches!(decode_response(&frame), Err(WireError::Malformed(m)) if m.contains(what)),
            "an explicit empty list of {what}: {:?}",
            decode_response(&frame)
        );
    }
    for name in ["pull_response", "priority_pull_response"] {
        let frame = get(name);
        let records = match decode_response(&frame).expect("decodes").1 {
            Response::Pull { records, .. } | Response::PriorityPull { records, .. } => records,
            other => panic!("{name}: {other:?}"),
        };
        assert!(records.is_empty(), "{name}: no trailer, no records");
    }

    let frame = get("get_tablet_map_response");
    let (
        _,
        Response::GetTabletMap {
            map_version,
            tablets,
        },
    ) = decode_response(&frame).expect("decodes")
    else {
        panic!("not a GetTabletMap");
    };
    assert_eq!(map_version, TABLET_MAP_VERSION);
    let got: Vec<_> = tablets
        .iter()
        .map(|t| (t.table_id, t.start_hash, t.end_hash, t.server_id, t.address))
        .collect();
    assert_eq!(got, tablet_map());

    let frame = get("backup_get_replicas_response");
    let (_, Response::BackupGetReplicas { replicas: list }) =
        decode_response(&frame).expect("decodes")
    else {
        panic!("not a BackupGetReplicas");
    };
    let got: Vec<_> = list
        .iter()
        .map(|r| (r.segment_id, r.length, r.closed))
        .collect();
    assert_eq!(got, replicas());

    for (name, frame) in frames
        .iter()
        .filter(|(n, _)| *n != "unknown_opcode_response")
    {
        let (header, resp) = decode_response(frame).expect("decodes");
        let mut out = Vec::new();
        encode_response(ID, header.opcode, &resp, &mut out).expect("re-encodes");
        assert_eq!(&out, frame, "{name}");
    }
}

#[test]
fn value_parts_encode_like_one_value() {
    let mut joined = Vec::new();
    let mut e = MultiReadResponseEncoder::new(ID, &mut joined);
    e.push_ok(3, b"hello world").expect("push");
    e.finish().expect("finish");
    let mut parts = Vec::new();
    let mut e = MultiReadResponseEncoder::new(ID, &mut parts);
    e.push_ok_parts(3, &[b"hello", b" ", b"world"])
        .expect("push");
    e.finish().expect("finish");
    assert_eq!(joined, parts);

    let mut joined = Vec::new();
    let mut e = EnumerateResponseEncoder::new(ID, &mut joined);
    e.push(3, b"k", b"hello world").expect("push");
    e.finish(false, 0).expect("finish");
    let mut parts = Vec::new();
    let mut e = EnumerateResponseEncoder::new(ID, &mut parts);
    e.push_parts(3, b"k", &[b"hello", b" world"]).expect("push");
    e.finish(false, 0).expect("finish");
    assert_eq!(joined, parts);
}

#[test]
fn every_truncation_is_an_error() {
    let mut frames = all_request_frames();
    frames.extend(all_response_frames());
    for (name, frame) in &frames {
        for cut in 0..frame.len() {
            let short = &frame[..cut];
            assert!(decode_request(short).is_err(), "{name} cut at {cut}");
            assert!(decode_response(short).is_err(), "{name} cut at {cut}");
            // The same cut with a length prefix that agrees: the body itself is short.
            // The one exception: a migration mode is an optional last byte (absent
            // means Rocksteady, so older peers' requests keep their meaning); cut
            // off, the request is the same migration in Rocksteady mode.
            if cut + 1 == frame.len() && has_optional_mode(name) {
                let mut patched = short.to_vec();
                patched[..4].copy_from_slice(&(cut as u32 - 4).to_le_bytes());
                let (_, req) = decode_request(&patched).expect("decodes without the mode");
                assert!(
                    matches!(
                        req,
                        Request::MigrateTablet {
                            mode: MigrationMode::Rocksteady,
                            ..
                        } | Request::TakeMigratingTablet {
                            mode: MigrationMode::Rocksteady,
                            ..
                        }
                    ),
                    "{name}: {req:?}"
                );
                continue;
            }
            // Likewise a RecoverPartition answer's ctime is an optional last
            // u64 (absent means 0: no cutoff, as from an older master).
            if cut + 8 == frame.len() && *name == "recover_partition_response_ctime" {
                let mut patched = short.to_vec();
                patched[..4].copy_from_slice(&(cut as u32 - 4).to_le_bytes());
                let (_, resp) = decode_response(&patched).expect("decodes without the ctime");
                assert!(
                    matches!(resp, Response::RecoverPartition { ctime: 0, .. }),
                    "{name}: {resp:?}"
                );
                continue;
            }
            // Likewise the rpc id trailer is optional as a whole (RIFL): without
            // it the request is the same operation, at least once.
            if cut + RPC_ID_BYTES == frame.len()
                && name.contains("exactly_once")
                && !name.starts_with("multi_")
            {
                let mut patched = short.to_vec();
                patched[..4].copy_from_slice(&(cut as u32 - 4).to_le_bytes());
                let (_, req) = decode_request(&patched).expect("decodes without the rpc id");
                assert!(
                    matches!(
                        req,
                        Request::Write { rpc_id: None, .. }
                            | Request::Remove { rpc_id: None, .. }
                            | Request::Increment { rpc_id: None, .. }
                    ),
                    "{name}: {req:?}"
                );
                continue;
            }
            // And a multi-op's rpc ids trailer (lease, first incomplete, one
            // sequence number per item): without it the same items, at least once.
            if name.starts_with("multi_") && name.contains("exactly_once") {
                let (_, whole) = decode_request(frame).expect("the golden frame decodes");
                let items = match whole {
                    Request::MultiWrite(items, _) => items.len(),
                    Request::MultiRemove(items, _) => items.len(),
                    other => panic!("{name}: {other:?}"),
                };
                if cut + 16 + 8 * items == frame.len() {
                    let mut patched = short.to_vec();
                    patched[..4].copy_from_slice(&(cut as u32 - 4).to_le_bytes());
                    let (_, req) = decode_request(&patched).expect("decodes without the ids");
                    assert!(
                        matches!(
                            req,
                            Request::MultiWrite(_, None) | Request::MultiRemove(_, None)
                        ),
                        "{name}: {req:?}"
                    );
                    continue;
                }
            }
            // And the completion records trailer of a Pull or PriorityPull
            // answer (RIFL §4.3): without it the answer carries no records.
            if name.ends_with("_with_records") && cut + records_trailer_len() == frame.len() {
                let mut patched = short.to_vec();
                patched[..4].copy_from_slice(&(cut as u32 - 4).to_le_bytes());
                let (_, resp) = decode_response(&patched).expect("decodes without records");
                assert!(
                    matches!(
                        resp,
                        Response::Pull { records, .. } | Response::PriorityPull { records, .. }
                            if records.is_empty()
                    ),
                    "{name}: {resp:?}"
                );
                continue;
            }
            // And the held commits trailer of a Pull answer (issue 21): cut
            // whole, or together with the records before it, the answer
            // carries none (an empty records count left alone is refused).
            if name.ends_with("_held") {
                let held_at = frame.len() - held_trailer_len();
                let objects_end = if name.ends_with("_records_and_held") {
                    held_at - records_trailer_len()
                } else {
                    held_at - 4
                };
                let records_only = name.ends_with("_records_and_held") && cut == held_at;
                if records_only || cut == objects_end {
                    let mut patched = short.to_vec();
                    patched[..4].copy_from_slice(&(cut as u32 - 4).to_le_bytes());
                    let (_, resp) = decode_response(&patched).expect("decodes without held");
                    assert!(
                        matches!(resp, Response::Pull { held, .. } if held.is_empty()),
                        "{name}: {resp:?}"
                    );
                    continue;
                }
            }
            if cut >= 20 {
                let mut patched = short.to_vec();
                patched[..4].copy_from_slice(&(cut as u32 - 4).to_le_bytes());
                assert!(
                    decode_request(&patched).is_err(),
                    "{name} body cut at {cut}"
                );
                assert!(
                    decode_response(&patched).is_err(),
                    "{name} body cut at {cut}"
                );
            }
        }
    }
}

/// Bytes of the sample records trailer: its count, then each record's four
/// u64s, result length and result.
fn records_trailer_len() -> usize {
    4 + moved_records()
        .iter()
        .map(|r| 4 * 8 + 1 + r.result.len())
        .sum::<usize>()
}

/// Bytes of the sample held commits trailer: its count, then each held
/// commit's lease id, tx seq, participant count and participants.
fn held_trailer_len() -> usize {
    let participants = held_participants();
    4 + held_commits(&participants)
        .iter()
        .map(|h| 8 + 8 + 4 + 16 * h.participants.len())
        .sum::<usize>()
}

/// Samples whose last byte is an optional migration mode.
fn has_optional_mode(name: &str) -> bool {
    name.ends_with("_stop_and_copy_request") || name.ends_with("_no_priority_pulls_request")
}

#[test]
fn an_explicit_rocksteady_mode_byte_is_an_error() {
    // One encoding per message: Rocksteady is sent as no byte.
    let frame = request_frame(&Request::MigrateTablet {
        name: "t",
        start_hash: 0,
        end_hash: 1,
        target_server_id: 2,
        mode: MigrationMode::Rocksteady,
    });
    let mut explicit = frame.clone();
    explicit.push(0);
    let len = explicit.len() as u32 - 4;
    explicit[..4].copy_from_slice(&len.to_le_bytes());
    assert!(matches!(
        decode_request(&explicit),
        Err(WireError::Malformed(_))
    ));
    let mut unknown = explicit.clone();
    *unknown.last_mut().expect("a byte") = 3;
    assert!(matches!(
        decode_request(&unknown),
        Err(WireError::BadEnum { .. })
    ));
}

#[test]
fn trailing_bytes_are_an_error() {
    let frame = request_frame(&Request::Ping {
        nonce: 1,
        caller_id: 0,
    });
    // After the frame the prefix announces.
    let mut long = frame.clone();
    long.push(0);
    assert_eq!(decode_request(&long), Err(WireError::TrailingBytes(1)));
    // Inside the frame, after the body.
    let mut padded = frame.clone();
    padded.extend_from_slice(&[0, 0]);
    let len = padded.len() as u32 - 4;
    padded[..4].copy_from_slice(&len.to_le_bytes());
    assert_eq!(decode_request(&padded), Err(WireError::TrailingBytes(2)));
}

#[test]
fn direction_and_header_fields_are_checked() {
    let req = request_frame(&Request::Ping {
        nonce: 1,
        caller_id: 0,
    });
    let resp = response_frame(
        Opcode::Ping,
        &Response::Ping {
            nonce: 1,
            server_id: 2,
        },
    );
    assert_eq!(decode_response(&req), Err(WireError::BadFlags(0)));
    assert_eq!(
        decode_request(&resp),
        Err(WireError::BadFlags(FLAG_RESPONSE))
    );

    let mut with_status = req.clone();
    with_status[6] = Status::Retry.code() as u8;
    assert!(matches!(
        decode_request(&with_status),
        Err(WireError::Malformed(_))
    ));

    let mut unknown_status = resp.clone();
    unknown_status[6] = 200;
    assert_eq!(
        decode_response(&unknown_status),
        Err(WireError::UnknownStatus(200))
    );
}

#[test]
fn unknown_opcode_is_reported_with_its_status() {
    let mut frame = request_frame(&Request::GetTabletMap);
    frame[4..6].copy_from_slice(&999u16.to_le_bytes());
    let err = decode_request(&frame).expect_err("unknown opcode");
    assert_eq!(err, WireError::UnknownOpcode(999));
    assert_eq!(err.status(), Status::UnknownOpcode);
    // The server can still answer it, with the request's id and opcode.
    let raw = decode_raw_header(&frame).expect("raw header");
    assert_eq!((raw.opcode, raw.request_id), (999, ID));
    let message = err.to_string();
    let mut out = Vec::new();
    encode_error_response(
        raw.request_id,
        raw.opcode,
        &ErrorBody::for_wire_error(&err, &message),
        &mut out,
    )
    .expect("encodes");
    let raw = decode_raw_header(&out).expect("raw header");
    assert_eq!(raw.status, Status::UnknownOpcode.code());
}

#[test]
fn oversize_keys_fail_to_encode_and_the_largest_key_round_trips() {
    let key = vec![7u8; MAX_KEY_BYTES + 1];
    assert_eq!(key.len(), 65536);
    let mut out = vec![0xaa];
    let err = encode_request(
        ID,
        &Request::Read {
            table_id: 1,
            rules: RejectRules::default(),
            key: &key,
        },
        &mut out,
    )
    .expect_err("key too large");
    assert_eq!(err, WireError::KeyTooLarge(65536));
    assert_eq!(err.status(), Status::TooLarge);
    assert_eq!(out, vec![0xaa], "a failed encode appends nothing");

    let mut e = MultiReadRequestEncoder::new(ID, &mut out);
    assert_eq!(e.push(1, &key), Err(WireError::KeyTooLarge(65536)));
    assert!(e.is_empty());
    drop(e);
    assert_eq!(
        out,
        vec![0xaa],
        "an unfinished encoder leaves nothing behind"
    );

    // A 16-bit length cannot describe a longer key, so the largest key decodes.
    let req = Request::Write {
        table_id: 1,
        rules: RejectRules::default(),
        key: &key[..MAX_KEY_BYTES],
        value: &[1; MAX_VALUE_BYTES],
        rpc_id: None,
    };
    let frame = request_frame(&req);
    assert_eq!(decode_request(&frame).expect("decodes").1, req);
}

#[test]
fn oversize_values_fail_to_encode_and_to_decode() {
    let value = vec![1u8; MAX_VALUE_BYTES + 1];
    let req = Request::Write {
        table_id: 1,
        rules: RejectRules::default(),
        key: b"k",
        value: &value,
        rpc_id: None,
    };
    let mut out = Vec::new();
    assert_eq!(
        encode_request(ID, &req, &mut out),
        Err(WireError::ValueTooLarge(MAX_VALUE_BYTES + 1))
    );
    assert!(out.is_empty());
    assert_eq!(
        encode_read_response_header(ID, 1, MAX_VALUE_BYTES + 1, &mut out),
        Err(WireError::ValueTooLarge(MAX_VALUE_BYTES + 1))
    );
    assert!(out.is_empty());

    // Hand-build the frame a buggy or hostile peer might send: a valid Write whose
    // value length exceeds the limit (and whose bytes are all present).
    let ok = request_frame(&Request::Write {
        table_id: 1,
        rules: RejectRules::default(),
        key: b"k",
        value: &value[..MAX_VALUE_BYTES],
        rpc_id: None,
    });
    let mut frame = ok.clone();
    frame.push(1);
    let len = frame.len() as u32 - 4;
    frame[..4].copy_from_slice(&len.to_le_bytes());
    // Body: table_id (8), rules (9), key len (2) + "k" (1), then the value length.
    let at = 20 + 8 + 9 + 2 + 1;
    frame[at..at + 4].copy_from_slice(&(MAX_VALUE_BYTES as u32 + 1).to_le_bytes());
    let err = decode_request(&frame).expect_err("value too large");
    assert_eq!(err, WireError::ValueTooLarge(MAX_VALUE_BYTES + 1));
    assert_eq!(err.status(), Status::TooLarge);
}

#[test]
fn frame_limits_are_enforced_when_encoding() {
    // Only so many 1 MiB values fit a frame: the push that would cross the limit
    // fails and the frame stays valid. Each item is table id (8), rules (9), key
    // length (2) + "k" (1), value length (4) and the value.
    let item_bytes = 8 + RULES_BYTES + 2 + 1 + 4 + MAX_VALUE_BYTES;
    let fit = (MAX_FRAME_BYTES - HEADER_BYTES - 4) / item_bytes;
    assert_eq!(fit, 8, "a whole segment's worth of values and no more");
    let value = vec![0u8; MAX_VALUE_BYTES];
    let mut out = Vec::new();
    let mut e = MultiWriteRequestEncoder::new(ID, &mut out);
    let mut pushed = 0;
    let err = loop {
        match e.push(1, RejectRules::default(), b"k", &value) {
            Ok(()) => pushed += 1,
            Err(err) => break err,
        }
    };
    assert!(matches!(err, WireError::FrameTooLarge(_)), "{err:?}");
    assert_eq!(pushed, fit);
    e.finish().expect("finish");
    let (_, Request::MultiWrite(items, None)) = decode_request(&out).expect("decodes") else {
        panic!("not a MultiWrite");
    };
    assert_eq!(items.len(), fit);

    // At most MAX_MULTI_OPS items.
    let mut out = Vec::new();
    let mut e = MultiReadRequestEncoder::new(ID, &mut out);
    for _ in 0..MAX_MULTI_OPS {
        e.push(1, b"").expect("push");
    }
    assert_eq!(
        e.push(1, b""),
        Err(WireError::TooManyItems(MAX_MULTI_OPS + 1))
    );
    e.finish().expect("finish");
    let (_, Request::MultiRead(items)) = decode_request(&out).expect("decodes") else {
        panic!("not a MultiRead");
    };
    assert_eq!(items.len(), MAX_MULTI_OPS);

    // A count over the limit is rejected on decode, before the items are looked at.
    let count_at = 20;
    out[count_at..count_at + 4].copy_from_slice(&(MAX_MULTI_OPS as u32 + 1).to_le_bytes());
    assert_eq!(
        decode_request(&out),
        Err(WireError::TooManyItems(MAX_MULTI_OPS + 1))
    );
}

#[test]
fn malformed_fields_are_rejected() {
    let base = request_frame(&Request::Increment {
        table_id: 1,
        rules: RejectRules::default(),
        kind: NumberKind::I64,
        delta: [0; 8],
        key: b"k",
        rpc_id: None,
    });
    // Rules bits sit after table_id; kind after the rules.
    let rules_at = 20 + 8 + 8;
    let mut bad = base.clone();
    bad[rules_at] = 0x20;
    assert_eq!(
        decode_request(&bad),
        Err(WireError::BadEnum {
            field: "reject rules",
            value: 0x20
        })
    );
    let mut bad = base.clone();
    bad[rules_at + 1] = 2;
    assert_eq!(
        decode_request(&bad),
        Err(WireError::BadEnum {
            field: "number kind",
            value: 2
        })
    );

    let name = request_frame(&Request::GetTableId { name: "ab" });
    let mut bad = name.clone();
    bad[22] = 0xff;
    assert_eq!(decode_request(&bad), Err(WireError::BadUtf8));

    let removed = response_frame(
        Opcode::Remove,
        &Response::Remove {
            existed: true,
            version: 1,
        },
    );
    let mut bad = removed.clone();
    bad[20] = 2;
    assert_eq!(
        decode_response(&bad),
        Err(WireError::BadEnum {
            field: "existed",
            value: 2
        })
    );

    // A failed multi-read item must not carry a value.
    let mut out = Vec::new();
    let mut e = MultiReadResponseEncoder::new(ID, &mut out);
    e.push_ok(1, b"v").expect("push");
    e.finish().expect("finish");
    out[24] = Status::ObjectDoesntExist.code() as u8;
    assert!(matches!(
        decode_response(&out),
        Err(WireError::Malformed(_))
    ));
}

#[test]
fn encoders_reject_inconsistent_responses() {
    let mut out = Vec::new();
    assert_eq!(
        encode_response(ID, Opcode::Read, &Response::Write { version: 1 }, &mut out),
        Err(WireError::OpcodeMismatch {
            header: Opcode::Read.code(),
            body: Opcode::Write.code()
        })
    );
    for status in [Status::Ok, Status::WrongVersion, Status::Retry] {
        let body = ErrorBody::Message {
            status,
            message: "",
        };
        assert!(matches!(
            encode_response(ID, Opcode::Read, &Response::Error(body), &mut out),
            Err(WireError::Malformed(_))
        ));
    }
    let mut e = MultiReadResponseEncoder::new(ID, &mut out);
    assert!(e.push_error(Status::Ok).is_err());
    drop(e);
    assert!(out.is_empty());
}

#[test]
fn frame_len_cuts_a_stream_into_frames() {
    let mut stream = Vec::new();
    let mut frames = all_request_frames();
    frames.extend(all_response_frames());
    for (_, f) in &frames {
        stream.extend_from_slice(f);
    }
    let mut rest = &stream[..];
    let mut n = 0;
    while let Some(len) = frame_len(rest).expect("valid prefix") {
        let (frame, tail) = rest.split_at(len);
        let header = decode_header(frame).expect("header");
        if header.is_response() {
            decode_response(frame).expect("response");
        } else {
            decode_request(frame).expect("request");
        }
        rest = tail;
        n += 1;
    }
    assert!(rest.is_empty());
    assert_eq!(n, frames.len());
}

#[test]
fn encode_replica_bytes_up_to_one_segment_and_no_more() {
    let segment = vec![0x5a; MAX_REPLICA_BYTES];
    // A closed segment re-replicated in one BackupWrite.
    let req = Request::BackupWrite {
        master_id: MASTER,
        segment_id: SEGMENT,
        offset: 0,
        flags: BackupWriteFlags {
            open: true,
            close: true,
            atomic: true,
            reserve: false,
        },
        bytes: &segment,
    };
    let frame = request_frame(&req);
    assert!(frame.len() - LEN_PREFIX_BYTES <= MAX_FRAME_BYTES);
    assert_eq!(frame_len(&frame), Ok(Some(frame.len())));
    assert_eq!(decode_request(&frame).expect("decodes").1, req);
    // A whole segment read back in recovery.
    let resp = Response::BackupReadReplica {
        closed: true,
        bytes: &segment,
    };
    let frame = response_frame(Opcode::BackupReadReplica, &resp);
    assert_eq!(frame_len(&frame), Ok(Some(frame.len())));
    assert_eq!(decode_response(&frame).expect("decodes").1, resp);

    // One byte more fails to encode, appending nothing ...
    let longer = vec![0x5a; MAX_REPLICA_BYTES + 1];
    let mut out = Vec::new();
    let err = encode_request(
        ID,
        &Request::BackupWrite {
            master_id: MASTER,
            segment_id: SEGMENT,
            offset: 0,
            flags: BackupWriteFlags::OPEN,
            bytes: &longer,
        },
        &mut out,
    )
    .expect_err("too large");
    assert_eq!(err, WireError::ReplicaTooLarge(MAX_REPLICA_BYTES + 1));
    assert_eq!(err.status(), Status::TooLarge);
    let err = encode_response(
        ID,
        Opcode::BackupReadReplica,
        &Response::BackupReadReplica {
            closed: false,
            bytes: &longer,
        },
        &mut out,
    )
    .expect_err("too large");
    assert_eq!(err, WireError::ReplicaTooLarge(MAX_REPLICA_BYTES + 1));
    assert!(out.is_empty());

    // ... and to decode, even when the frame holds the bytes.
    let mut frame = request_frame(&Request::BackupWrite {
        master_id: MASTER,
        segment_id: SEGMENT,
        offset: 0,
        flags: BackupWriteFlags::OPEN,
        bytes: &segment,
    });
    frame.push(0x5a);
    let len = frame.len() as u32 - 4;
    frame[..4].copy_from_slice(&len.to_le_bytes());
    // Body: master (8), segment (8), offset (4), flags (1), then the length.
    let at = 20 + 8 + 8 + 4 + 1;
    frame[at..at + 4].copy_from_slice(&(MAX_REPLICA_BYTES as u32 + 1).to_le_bytes());
    assert_eq!(
        decode_request(&frame),
        Err(WireError::ReplicaTooLarge(MAX_REPLICA_BYTES + 1))
    );
}

#[test]
fn backup_write_flags_are_checked_when_decoding() {
    let frame = request_frame(&Request::BackupWrite {
        master_id: MASTER,
        segment_id: SEGMENT,
        offset: 0,
        flags: BackupWriteFlags::WRITE,
        bytes: b"",
    });
    let at = 20 + 8 + 8 + 4;
    for (bits, atomic_alone) in [
        (0x10u8, false),
        (BACKUP_WRITE_RESERVE, true),
        (0x80, false),
        (BACKUP_WRITE_ATOMIC, true),
    ] {
        let mut bad = frame.clone();
        bad[at] = bits;
        let err = decode_request(&bad).expect_err("bad flags");
        if atomic_alone {
            assert!(matches!(err, WireError::Malformed(_)), "{err:?}");
        } else {
            assert!(matches!(err, WireError::BadEnum { .. }), "{err:?}");
        }
        assert_eq!(err.status(), Status::InvalidRequest);
    }
    // Encoding refuses ATOMIC without OPEN as well, appending nothing.
    let mut out = Vec::new();
    let err = encode_request(
        ID,
        &Request::BackupWrite {
            master_id: MASTER,
            segment_id: SEGMENT,
            offset: 0,
            flags: BackupWriteFlags {
                atomic: true,
                reserve: false,
                ..BackupWriteFlags::WRITE
            },
            bytes: b"x",
        },
        &mut out,
    )
    .expect_err("atomic without open");
    assert!(matches!(err, WireError::Malformed(_)));
    assert!(out.is_empty());
    // A bad `closed` byte in a response.
    let mut frame = response_frame(
        Opcode::BackupReadReplica,
        &Response::BackupReadReplica {
            closed: false,
            bytes: b"x",
        },
    );
    frame[20] = 2;
    assert!(matches!(
        decode_response(&frame),
        Err(WireError::BadEnum { .. })
    ));
}

#[test]
fn oversize_failure_domains_fail_to_encode_and_to_decode() {
    let longest = "d".repeat(MAX_FAILURE_DOMAIN_BYTES);
    let too_long = "d".repeat(MAX_FAILURE_DOMAIN_BYTES + 1);
    let enlist = |failure_domain| Request::Enlist {
        replaces_server_id: 0,
        services: Services::BOTH,
        memory_bytes: 1 << 30,
        backup_read_mbps: 120,
        address: "10.0.0.1:7000",
        failure_domain,
    };
    let mut out = vec![0xaa];
    let err = encode_request(ID, &enlist(&too_long), &mut out).expect_err("domain too long");
    assert_eq!(
        err,
        WireError::FailureDomainTooLarge(MAX_FAILURE_DOMAIN_BYTES + 1)
    );
    assert_eq!(err.status(), Status::TooLarge);
    assert_eq!(out, vec![0xaa], "a failed encode appends nothing");

    let mut e = ServerListUpdateEncoder::new(ID, 1, &mut out);
    let mut server = server_list()[0];
    server.failure_domain = &too_long;
    assert_eq!(
        e.push(&server),
        Err(WireError::FailureDomainTooLarge(
            MAX_FAILURE_DOMAIN_BYTES + 1
        ))
    );
    assert!(e.is_empty());
    drop(e);
    assert_eq!(out, vec![0xaa]);

    // The longest domain round-trips; one byte more (length field and bytes
    // patched into a valid frame) is refused by the decoder.
    let req = enlist(&longest);
    let mut frame = request_frame(&req);
    assert_eq!(decode_request(&frame).expect("decodes").1, req);
    let len_at = frame.len() - MAX_FAILURE_DOMAIN_BYTES - 2;
    frame[len_at..len_at + 2].copy_from_slice(&(MAX_FAILURE_DOMAIN_BYTES as u16 + 1).to_le_bytes());
    frame.push(b'd');
    let prefix = u32::from_le_bytes(frame[..4].try_into().expect("4 bytes")) + 1;
    frame[..4].copy_from_slice(&prefix.to_le_bytes());
    assert_eq!(
        decode_request(&frame),
        Err(WireError::FailureDomainTooLarge(
            MAX_FAILURE_DOMAIN_BYTES + 1
        ))
    );
}

/// RIFL's rpc id trailer (lib.rs "Exactly-once RPCs"): absent and present both
/// round-trip; a malformed one is refused, never read as at-least-once.
#[test]
fn decode_request_rpc_id_trailer_round_trips_and_rejects_bad_ids() {
    let good = RpcId {
        lease_id: 3,
        seq: 9,
        first_incomplete: 4,
    };
    for rpc_id in [None, Some(good)] {
        let req = Request::Increment {
            table_id: 1,
            rules: RejectRules::default(),
            kind: NumberKind::I64,
            delta: 2i64.to_le_bytes(),
            key: b"c",
            rpc_id,
        };
        let frame = request_frame(&req);
        let (_, decoded) = decode_request(&frame).expect("decodes");
        assert_eq!(decoded, req);
    }
    let bad_ids = [
        RpcId {
            lease_id: 0,
            ..good
        },
        RpcId { seq: 0, ..good },
        RpcId {
            first_incomplete: 10,
            ..good
        },
    ];
    for bad in bad_ids {
        let req = Request::Remove {
            table_id: 1,
            rules: RejectRules::default(),
            key: b"k",
            rpc_id: Some(bad),
        };
        let mut out = Vec::new();
        assert!(
            encode_request(1, &req, &mut out).is_err(),
            "{bad:?} encoded"
        );
        // Hand-made: a valid frame with the bad trailer patched in.
        let mut frame = request_frame(&Request::Remove {
            rpc_id: Some(good),
            table_id: 1,
            rules: RejectRules::default(),
            key: b"k",
        });
        let at = frame.len() - RPC_ID_BYTES;
        frame[at..at + 8].copy_from_slice(&bad.lease_id.to_le_bytes());
        frame[at + 8..at + 16].copy_from_slice(&bad.seq.to_le_bytes());
        frame[at + 16..].copy_from_slice(&bad.first_incomplete.to_le_bytes());
        assert!(decode_request(&frame).is_err(), "{bad:?} decoded");
    }
    // A cut trailer is malformed, not absent.
    let mut frame = request_frame(&Request::Write {
        table_id: 1,
        rules: RejectRules::default(),
        key: b"k",
        value: b"v",
        rpc_id: Some(good),
    });
    frame.truncate(frame.len() - 1);
    let len = (frame.len() - 4) as u32;
    frame[..4].copy_from_slice(&len.to_le_bytes());
    assert!(decode_request(&frame).is_err());
}

/// The records trailer is optional but never empty: an answer with an explicit
/// count of 0 has a second encoding, so it is refused; so is a result over 32
/// bytes.
#[test]
fn decode_response_refuses_an_empty_or_oversize_records_trailer() {
    let mut out = Vec::new();
    PriorityPullResponseEncoder::new(ID, &mut out)
        .finish()
        .expect("finish");
    let mut empty_trailer = out.clone();
    empty_trailer.extend_from_slice(&0u32.to_le_bytes());
    let len = (empty_trailer.len() - 4) as u32;
    empty_trailer[..4].copy_from_slice(&len.to_le_bytes());
    assert!(matches!(
        decode_response(&empty_trailer),
        Err(WireError::Malformed(_))
    ));

    let long = [0u8; MAX_MOVED_RESULT_BYTES + 1];
    let mut out = Vec::new();
    let refused =
        PriorityPullResponseEncoder::new(ID, &mut out).finish_with_records([MovedRpcResult {
            table_id: 1,
            key_hash: 2,
            lease_id: 3,
            seq: 4,
            result: &long,
        }]);
    assert!(refused.is_err());
    assert!(out.is_empty(), "a refused frame leaves nothing behind");
}

/// A MultiWrite of `n` items, with the given per-item rpc ids (issue 21).
fn multi_write_frame(n: usize, ids: Option<(u64, u64, &[u64])>) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::new();
    let mut e = MultiWriteRequestEncoder::new(1, &mut out);
    for i in 0..n {
        e.push(1, RejectRules::default(), format!("k{i}").as_bytes(), b"v")?;
    }
    match ids {
        Some((lease, first, seqs)) => e.finish_with_rpc_ids(lease, first, seqs)?,
        None => e.finish()?,
    }
    Ok(out)
}

/// Multi-op rpc ids (lib.rs "Exactly-once RPCs"; RIFL §4, one id per item):
/// each item's id decodes back, a frame without them still decodes as
/// at-least-once, and ids that break a rule are refused by the encoder and
/// the decoder alike.
#[test]
fn decode_request_multi_rpc_ids_round_trip_and_reject_bad_ids() {
    let frame = multi_write_frame(3, Some((7, 5, &[5, 6, 9]))).expect("encodes");
    let (_, decoded) = decode_request(&frame).expect("decodes");
    let Request::MultiWrite(items, Some(ids)) = decoded else {
        panic!("{decoded:?}");
    };
    assert_eq!(items.len(), 3);
    let got: Vec<RpcId> = ids.iter().collect();
    let want: Vec<RpcId> = [5, 6, 9]
        .iter()
        .map(|&seq| RpcId {
            lease_id: 7,
            seq,
            first_incomplete: 5,
        })
        .collect();
    assert_eq!(got, want);
    assert_eq!(ids.get(2), Some(want[2]));
    assert_eq!(ids.get(3), None);
    // Re-encoding gives the same bytes.
    let mut again = Vec::new();
    encode_request(1, &Request::MultiWrite(items, Some(ids)), &mut again).expect("re-encodes");
    assert_eq!(again, frame);

    // Without the trailer: at-least-once, as before.
    let plain = multi_write_frame(3, None).expect("encodes");
    assert!(matches!(
        decode_request(&plain),
        Ok((_, Request::MultiWrite(_, None)))
    ));

    // Refused when encoding: wrong count, lease 0, seq 0, not increasing,
    // a window starting above an item.
    let bad: [(u64, u64, &[u64]); 6] = [
        (7, 1, &[1, 2]),
        (7, 1, &[1, 2, 3, 4]),
        (0, 1, &[1, 2, 3]),
        (7, 0, &[0, 2, 3]),
        (7, 1, &[1, 3, 3]),
        (7, 3, &[2, 3, 4]),
    ];
    for (lease, first, seqs) in bad {
        assert!(
            multi_write_frame(3, Some((lease, first, seqs))).is_err(),
            "{lease} {first} {seqs:?} encoded"
        );
        // Hand-made: the good frame with the bad ids patched into its trailer
        // (same count only).
        if seqs.len() == 3 {
            let mut f = frame.clone();
            let at = f.len() - 16 - 24;
            f[at..at + 8].copy_from_slice(&lease.to_le_bytes());
            f[at + 8..at + 16].copy_from_slice(&first.to_le_bytes());
            for (i, s) in seqs.iter().enumerate() {
                f[at + 16 + 8 * i..at + 24 + 8 * i].copy_from_slice(&s.to_le_bytes());
            }
            assert!(
                decode_request(&f).is_err(),
                "{lease} {first} {seqs:?} decoded"
            );
        }
    }
    // A cut trailer (one seq short) is malformed, not absent.
    let mut cut = frame.clone();
    cut.truncate(cut.len() - 8);
    let len = (cut.len() - 4) as u32;
    cut[..4].copy_from_slice(&len.to_le_bytes());
    assert!(decode_request(&cut).is_err());
}
