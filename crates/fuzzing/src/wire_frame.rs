//! Wire frames: the request and response decoders.
//!
//! Decoding must never panic, and any input that decodes as a request or a response
//! must re-encode to exactly the bytes it was decoded from (decoding is strict, so a
//! message has one encoding). Lists are walked in full, since iteration re-parses
//! the validated bytes.

use ramstore_wire::{
    decode_header, decode_raw_header, decode_request, decode_response, encode_request,
    encode_response, frame_len, Request, Response,
};

/// Decodes `data` as one frame, then as a stream of frames cut by their prefixes
/// (as a transport reads a socket), so frames with consistent prefixes reach the
/// body decoders.
pub fn check(data: &[u8]) {
    check_frame(data);
    let mut rest = data;
    while let Ok(Some(len)) = frame_len(rest) {
        if len > rest.len() {
            break;
        }
        let (frame, tail) = rest.split_at(len);
        check_frame(frame);
        rest = tail;
    }
}

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

fn check_frame(frame: &[u8]) {
    let _ = decode_raw_header(frame);
    let _ = decode_header(frame);
    let mut out = Vec::new();
    if let Ok((header, req)) = decode_request(frame) {
        walk_request(&req);
        encode_request(header.request_id, &req, &mut out).expect("decoded request re-encodes");
        assert_eq!(out, frame);
    }
    out.clear();
    if let Ok((header, resp)) = decode_response(frame) {
        walk_response(&resp);
        encode_response(header.request_id, header.opcode, &resp, &mut out)
            .expect("decoded response re-encodes");
        assert_eq!(out, frame);
    }
}
