//! Connection state machine against a scripted in-memory peer: the cases a healthy
//! ovs-vswitchd never produces (silence, bad frames, odd HELLOs). Time is paused, so the
//! keepalive timers run instantly and deterministically.

use openflow::message::{Hello, SwitchFeatures};
use openflow::{Config, ConnError, Connection, Header, Message};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

async fn read_msg(s: &mut DuplexStream) -> (Header, Message) {
    let mut h = [0u8; 8];
    s.read_exact(&mut h).await.unwrap();
    let len = u16::from_be_bytes([h[2], h[3]]) as usize;
    let mut buf = h.to_vec();
    buf.resize(len, 0);
    s.read_exact(&mut buf[8..]).await.unwrap();
    Message::decode(&buf).unwrap()
}

/// Play the switch's side of HELLO and FEATURES; returns the peer end.
async fn handshake_peer(mut peer: DuplexStream, hello: Vec<u8>) -> DuplexStream {
    let (_, m) = read_msg(&mut peer).await;
    assert!(matches!(m, Message::Hello(_)));
    peer.write_all(&hello).await.unwrap();
    let (h, m) = read_msg(&mut peer).await;
    assert_eq!(m, Message::FeaturesRequest);
    let f = SwitchFeatures {
        datapath_id: 42,
        n_tables: 254,
        ..Default::default()
    };
    peer.write_all(&Message::FeaturesReply(f).encode(h.xid))
        .await
        .unwrap();
    peer
}

fn fast() -> Config {
    Config {
        echo_interval: Duration::from_millis(100),
        dead_after: Duration::from_millis(300),
        ..Config::default()
    }
}

async fn connected(cfg: Config) -> (Connection, openflow::Events, DuplexStream) {
    let (ours, peer) = tokio::io::duplex(1 << 16);
    let hello = Message::Hello(Hello::of13()).encode(1);
    let peer_task = tokio::spawn(handshake_peer(peer, hello));
    let (conn, events) = Connection::from_stream("test", ours, cfg).await.unwrap();
    (conn, events, peer_task.await.unwrap())
}

#[tokio::test(start_paused = true)]
async fn answers_the_switch_echo_and_probes_a_silent_switch() {
    let (conn, _ev, mut peer) = connected(fast()).await;
    assert_eq!(conn.features().datapath_id, 42);
    peer.write_all(&Message::EchoRequest(b"ping".to_vec()).encode(99))
        .await
        .unwrap();
    let (h, m) = read_msg(&mut peer).await;
    assert_eq!((h.xid, m), (99, Message::EchoReply(b"ping".to_vec())));
    // Silence: we send our own probe.
    let (_, m) = read_msg(&mut peer).await;
    assert!(matches!(m, Message::EchoRequest(_)), "{m:?}");
    assert!(conn.closed().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_silent_peer_is_declared_dead_and_pending_requests_fail() {
    let (conn, mut ev, _peer) = connected(fast()).await;
    let err = conn.barrier().await.unwrap_err();
    match &err {
        ConnError::Closed(r) => assert!(r.contains("dead peer"), "{r}"),
        e => panic!("{e}"),
    }
    match ev.recv().await {
        Some(openflow::Event::Closed(ConnError::Closed(r))) => assert!(r.contains("dead peer")),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn an_answered_echo_keeps_the_connection_alive() {
    let (conn, _ev, mut peer) = connected(fast()).await;
    // Answer every probe for a while: 30 intervals, ten times dead_after.
    for _ in 0..30 {
        let (h, m) = read_msg(&mut peer).await;
        assert!(matches!(m, Message::EchoRequest(_)));
        peer.write_all(&Message::EchoReply(vec![]).encode(h.xid))
            .await
            .unwrap();
    }
    assert!(conn.closed().is_none());
}

#[tokio::test]
async fn a_frame_shorter_than_a_header_closes_with_a_clear_reason() {
    let (conn, _ev, mut peer) = connected(Config::default()).await;
    let pending = tokio::spawn({
        let c = conn.clone();
        async move { c.barrier().await }
    });
    let _ = read_msg(&mut peer).await; // the barrier request
    peer.write_all(&[4, 21, 0, 4, 0, 0, 0, 0]).await.unwrap();
    match pending.await.unwrap() {
        Err(ConnError::Closed(r)) => assert!(r.contains("below the 8-byte header"), "{r}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn an_undecodable_reply_fails_only_its_request() {
    let (conn, _ev, mut peer) = connected(Config::default()).await;
    let pending = tokio::spawn({
        let c = conn.clone();
        async move { c.desc().await }
    });
    let (h, _) = read_msg(&mut peer).await;
    // A DESC reply cut short: well framed, bad body.
    let mut bad = vec![4, 19, 0, 20];
    bad.extend_from_slice(&h.xid.to_be_bytes());
    bad.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4]);
    peer.write_all(&bad).await.unwrap();
    assert!(matches!(pending.await.unwrap(), Err(ConnError::Decode(_))));
    // Still in sync: the next request works.
    let next = tokio::spawn({
        let c = conn.clone();
        async move { c.barrier().await }
    });
    let (h, m) = read_msg(&mut peer).await;
    assert_eq!(m, Message::BarrierRequest);
    peer.write_all(&Message::BarrierReply.encode(h.xid))
        .await
        .unwrap();
    next.await.unwrap().unwrap();
}

#[tokio::test]
async fn negotiation_uses_the_bitmap_and_refuses_old_peers() {
    // A newer switch announcing 1.3 and 1.5: fine.
    let (ours, peer) = tokio::io::duplex(1 << 16);
    let mut hello = Message::Hello(Hello {
        version_bitmap: vec![(1 << 4) | (1 << 6)],
    })
    .encode(1);
    hello[0] = 6;
    let p = tokio::spawn(handshake_peer(peer, hello));
    assert!(
        Connection::from_stream("new", ours, Config::default())
            .await
            .is_ok()
    );
    drop(p.await);

    // An OpenFlow 1.0 switch without a bitmap: a clear version error, and we tell it why.
    let (ours, mut peer) = tokio::io::duplex(1 << 16);
    let p = tokio::spawn(async move {
        let _ = read_msg(&mut peer).await;
        peer.write_all(&[1, 0, 0, 8, 0, 0, 0, 7]).await.unwrap();
        read_msg(&mut peer).await
    });
    match Connection::from_stream("old", ours, Config::default()).await {
        Err(ConnError::Version { target, detail }) => {
            assert_eq!(target, "old");
            assert!(detail.contains("0x01"), "{detail}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("negotiated with an OpenFlow 1.0 peer"),
    }
    let (h, m) = p.await.unwrap();
    assert_eq!(h.xid, 7);
    assert!(matches!(m, Message::Error(e) if e.err_type == 0));
}
