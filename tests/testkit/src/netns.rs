//! Real packets from inside network namespaces, without helper programs.
//!
//! A thread can enter a network namespace on its own (`setns(CLONE_NEWNET)`), and a socket it
//! makes there stays in that namespace for life, whichever thread uses it later. So the test
//! process itself is the client and the pods' servers: it knows exactly what was sent, what came
//! back and when, and nothing outlives the test.

use std::io::{self, Read, Write};
use std::net::{
    IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6, TcpListener, TcpStream, UdpSocket,
};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Run `f` on a thread inside the named namespace (`/run/netns/<ns>`).
pub fn in_netns<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path)?;
        // SAFETY: setns on a valid fd; it changes only this thread's namespace.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        f()
    })
    .join()
    .map_err(|_| io::Error::other("namespace thread panicked"))?
}

/// Whether this process may make network namespaces (root, and a kernel that allows them).
pub fn can_make_namespaces() -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return false;
    }
    std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The TCP and UDP port every pod server listens on.
pub const POD_TCP_PORT: u16 = 8080;
pub const POD_UDP_PORT: u16 = 5353;

/// A pod's servers: TCP on [`POD_TCP_PORT`] answers `"<pod> <client ip>\n"` and closes; UDP on
/// [`POD_UDP_PORT`] answers each datagram with `"<pod> <client ip> <bytes received>"`. Both
/// listen on `[::]`, so IPv4 and IPv6 alike. Stopped on drop.
pub struct PodServer {
    stop: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
    threads: Vec<JoinHandle<()>>,
}

fn peer_ip(a: SocketAddr) -> IpAddr {
    a.ip().to_canonical()
}

/// Wait until `fd` is readable or 50 ms passed.
fn readable(fd: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, 50) > 0 }
}

impl PodServer {
    pub fn start(ns: &str, pod: &str) -> io::Result<PodServer> {
        let (tcp, udp) = in_netns(ns, || {
            let tcp = TcpListener::bind("[::]:8080")?;
            let udp = UdpSocket::bind("[::]:5353")?;
            Ok((tcp, udp))
        })?;
        tcp.set_nonblocking(true)?;
        udp.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicU64::new(0));
        let name = pod.to_string();
        let s = stop.clone();
        let count = served.clone();
        let t_tcp = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if !readable(tcp.as_raw_fd()) {
                    continue;
                }
                while let Ok((mut conn, peer)) = tcp.accept() {
                    count.fetch_add(1, Ordering::Relaxed);
                    let _ = conn.set_nonblocking(false);
                    let _ = conn.write_all(format!("{name} {}\n", peer_ip(peer)).as_bytes());
                }
            }
        });
        let name = pod.to_string();
        let s = stop.clone();
        let count = served.clone();
        let t_udp = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            while !s.load(Ordering::Relaxed) {
                if !readable(udp.as_raw_fd()) {
                    continue;
                }
                while let Ok((n, peer)) = udp.recv_from(&mut buf) {
                    count.fetch_add(1, Ordering::Relaxed);
                    let reply = format!("{name} {} {n}", peer_ip(peer));
                    let _ = udp.send_to(reply.as_bytes(), peer);
                }
            }
        });
        Ok(PodServer {
            stop,
            served,
            threads: vec![t_tcp, t_udp],
        })
    }

    /// The TCP connections it accepted and the UDP datagrams it answered so far.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }
}

impl Drop for PodServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Connect to `addr` from namespace `ns` and read the server's line.
pub fn tcp_request(ns: &str, addr: SocketAddr, timeout: Duration) -> io::Result<String> {
    let stream = in_netns(ns, move || TcpStream::connect_timeout(&addr, timeout))?;
    read_line(stream, timeout)
}

/// [`tcp_request`] from the local address `from` (a chosen source port), so that each of many
/// connections is a flow the caller can name afterwards (in a conntrack dump).
pub fn tcp_request_from(
    ns: &str,
    from: SocketAddr,
    to: SocketAddr,
    timeout: Duration,
) -> io::Result<String> {
    let stream = in_netns(ns, move || {
        use socket2::{Domain, Protocol, Socket, Type};
        let s = Socket::new(Domain::for_address(to), Type::STREAM, Some(Protocol::TCP))?;
        s.bind(&from.into())?;
        s.connect_timeout(&to.into(), timeout)?;
        Ok(TcpStream::from(s))
    })?;
    read_line(stream, timeout)
}

fn read_line(mut stream: TcpStream, timeout: Duration) -> io::Result<String> {
    stream.set_read_timeout(Some(timeout))?;
    let mut out = String::new();
    stream.read_to_string(&mut out)?;
    Ok(out.trim().to_string())
}

/// A TCP client socket made in `ns`, to connect later from any thread (probing loops).
pub struct NsTcp {
    ns: String,
}

impl NsTcp {
    pub fn new(ns: &str) -> NsTcp {
        NsTcp { ns: ns.to_string() }
    }

    /// One request: connect, read the line, close.
    pub fn request(&self, addr: SocketAddr, timeout: Duration) -> io::Result<String> {
        tcp_request(&self.ns, addr, timeout)
    }
}

/// A UDP socket in namespace `ns`; each [`NsUdp::request`] sends one datagram of `size` bytes
/// and waits for the answer.
pub struct NsUdp {
    sock: UdpSocket,
}

impl NsUdp {
    pub fn new(ns: &str, v6: bool) -> io::Result<NsUdp> {
        let sock = in_netns(ns, move || {
            UdpSocket::bind(if v6 { "[::]:0" } else { "0.0.0.0:0" })
        })?;
        Ok(NsUdp { sock })
    }

    /// The socket itself, for senders and receivers of their own (a prober).
    pub fn socket(&self) -> &UdpSocket {
        &self.sock
    }

    pub fn request(&self, addr: SocketAddr, size: usize, timeout: Duration) -> io::Result<String> {
        let payload = vec![b'x'; size];
        self.sock.send_to(&payload, addr)?;
        let deadline = Instant::now() + timeout;
        let mut buf = vec![0u8; 2048];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "no UDP answer"));
            }
            self.sock.set_read_timeout(Some(left))?;
            match self.sock.recv_from(&mut buf) {
                // A late answer to an earlier datagram is not this one's: it names another size.
                Ok((n, from)) if from == addr => {
                    let s = String::from_utf8_lossy(&buf[..n]).into_owned();
                    if s.ends_with(&format!(" {size}")) {
                        return Ok(s);
                    }
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "no UDP answer"));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// One answer to an ARP request or a neighbor solicitation: who answered.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct NeighborReply {
    /// Source MAC of the Ethernet frame (ARP) or the target link-layer address (ND).
    pub mac: [u8; 6],
}

pub fn format_mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn ifindex(name: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(name).map_err(io::Error::other)?;
    // SAFETY: a valid C string.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(i)
    }
}

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn set_rcv_timeout(fd: i32, d: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: d.as_secs() as libc::time_t,
        tv_usec: d.subsec_micros().max(1000) as libc::suseconds_t,
    };
    // SAFETY: a valid timeval of the right size.
    check(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as u32,
        )
    })?;
    Ok(())
}

/// Broadcast one ARP request "who has `target`, tell `sender`" out of `iface` in `ns`, and
/// collect every reply for `target` that arrives within `wait`.
pub fn arp_request(
    ns: &str,
    iface: &str,
    sender: Ipv4Addr,
    target: Ipv4Addr,
    wait: Duration,
) -> io::Result<Vec<NeighborReply>> {
    let iface = iface.to_string();
    in_netns(ns, move || {
        let proto = (libc::ETH_P_ARP as u16).to_be();
        let (fd, sll) = packet_socket(&iface, proto)?;
        let len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
        let mac = own_mac(&iface)?;

        let mut frame = Vec::with_capacity(42);
        frame.extend_from_slice(&[0xff; 6]);
        frame.extend_from_slice(&mac);
        frame.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
        frame.extend_from_slice(&mac);
        frame.extend_from_slice(&sender.octets());
        frame.extend_from_slice(&[0; 6]);
        frame.extend_from_slice(&target.octets());
        let mut to = sll;
        to.sll_halen = 6;
        to.sll_addr[..6].copy_from_slice(&[0xff; 6]);
        // SAFETY: frame and `to` are valid for the given lengths.
        check(unsafe {
            libc::sendto(
                fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&to as *const libc::sockaddr_ll).cast(),
                len,
            ) as i32
        })?;

        // An ARP reply (op 2) from `target`.
        collect(&fd, wait, |f| {
            if f.len() >= 42
                && f[12..14] == [0x08, 0x06]
                && f[20..22] == [0, 2]
                && f[28..32] == target.octets()
            {
                let mut mac = [0u8; 6];
                mac.copy_from_slice(&f[6..12]);
                vec![NeighborReply { mac }]
            } else {
                Vec::new()
            }
        })
    })
}

/// Send one neighbor solicitation for `target` (to its solicited-node multicast group) out of
/// `iface` in `ns`, and collect every solicited advertisement for `target` that arrives within
/// `wait`.
pub fn neighbor_solicit(
    ns: &str,
    iface: &str,
    target: Ipv6Addr,
    wait: Duration,
) -> io::Result<Vec<NeighborReply>> {
    solicit(ns, iface, target, false, wait)
}

/// Like [`neighbor_solicit`], but sent to `target` itself, as the kernel checks that a known
/// neighbor is still reachable (NUD). The client must know `target`'s MAC already, or the
/// kernel's own resolution adds an advertisement to what is collected.
pub fn neighbor_solicit_unicast(
    ns: &str,
    iface: &str,
    target: Ipv6Addr,
    wait: Duration,
) -> io::Result<Vec<NeighborReply>> {
    solicit(ns, iface, target, true, wait)
}

fn solicit(
    ns: &str,
    iface: &str,
    target: Ipv6Addr,
    unicast: bool,
    wait: Duration,
) -> io::Result<Vec<NeighborReply>> {
    let iface = iface.to_string();
    in_netns(ns, move || {
        // SAFETY: plain socket call; the fd is owned right away.
        let fd =
            check(unsafe { libc::socket(libc::AF_INET6, libc::SOCK_RAW, libc::IPPROTO_ICMPV6) })?;
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let idx = ifindex(&iface)?;
        let hops: libc::c_int = 255;
        for opt in [libc::IPV6_MULTICAST_HOPS, libc::IPV6_UNICAST_HOPS] {
            // SAFETY: an int option.
            check(unsafe {
                libc::setsockopt(
                    fd.as_raw_fd(),
                    libc::IPPROTO_IPV6,
                    opt,
                    (&hops as *const i32).cast(),
                    4,
                )
            })?;
        }
        let idx_i = idx as libc::c_int;
        // SAFETY: an int option.
        check(unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::IPPROTO_IPV6,
                libc::IPV6_MULTICAST_IF,
                (&idx_i as *const i32).cast(),
                4,
            )
        })?;
        // The interface MAC for the source link-layer address option.
        let mac = own_mac(&iface)?;
        let t = target.octets();
        let mut msg = vec![135u8, 0, 0, 0, 0, 0, 0, 0];
        msg.extend_from_slice(&t);
        msg.extend_from_slice(&[1, 1]);
        msg.extend_from_slice(&mac);
        let group = Ipv6Addr::new(
            0xff02,
            0,
            0,
            0,
            0,
            1,
            0xff00 | u16::from(t[13]),
            u16::from_be_bytes([t[14], t[15]]),
        );
        let dst = SocketAddrV6::new(if unicast { target } else { group }, 0, 0, idx);
        let sa = sockaddr_in6(&dst);
        // SAFETY: msg and sa are valid for the given lengths.
        check(unsafe {
            libc::sendto(
                fd.as_raw_fd(),
                msg.as_ptr().cast(),
                msg.len(),
                0,
                (&sa as *const libc::sockaddr_in6).cast(),
                std::mem::size_of::<libc::sockaddr_in6>() as u32,
            ) as i32
        })?;
        // A neighbor advertisement (136) for `target`, with its target link-layer option.
        collect(&fd, wait, |m| {
            let mut replies = Vec::new();
            // Solicited only: an unsolicited advertisement (a new owner announcing itself)
            // is not an answer to this solicitation.
            if m.len() >= 24 && m[0] == 136 && m[4] & 0x40 != 0 && m[8..24] == t {
                let mut opts = &m[24..];
                while opts.len() >= 8 && opts[1] > 0 {
                    let l = usize::from(opts[1]) * 8;
                    if opts[0] == 2 {
                        let mut mac = [0u8; 6];
                        mac.copy_from_slice(&opts[2..8]);
                        replies.push(NeighborReply { mac });
                    }
                    if l > opts.len() {
                        break;
                    }
                    opts = &opts[l..];
                }
            }
            replies
        })
    })
}

/// Receive on `fd` until `wait` has passed, keeping what `parse` finds in each packet.
fn collect(
    fd: &OwnedFd,
    wait: Duration,
    parse: impl Fn(&[u8]) -> Vec<NeighborReply>,
) -> io::Result<Vec<NeighborReply>> {
    let deadline = Instant::now() + wait;
    let mut replies = Vec::new();
    let mut buf = [0u8; 1514];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(replies);
        }
        set_rcv_timeout(fd.as_raw_fd(), left)?;
        // SAFETY: buf is valid for its length.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) {
                return Ok(replies);
            }
            return Err(e);
        }
        replies.extend(parse(&buf[..n as usize]));
    }
}

fn sockaddr_in6(a: &SocketAddrV6) -> libc::sockaddr_in6 {
    // SAFETY: zeroed sockaddr_in6 is a valid value.
    let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
    sa.sin6_family = libc::AF_INET6 as u16;
    sa.sin6_port = a.port().to_be();
    sa.sin6_addr.s6_addr = a.ip().octets();
    sa.sin6_scope_id = a.scope_id();
    sa
}

/// An AF_PACKET socket for `proto` (network order; 0 for none) bound to `iface` in the calling
/// thread's namespace, and its address.
fn packet_socket(iface: &str, proto: u16) -> io::Result<(OwnedFd, libc::sockaddr_ll)> {
    // SAFETY: plain socket call; the fd is owned right away.
    let fd = check(unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, i32::from(proto)) })?;
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: zeroed sockaddr_ll is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = ifindex(iface)? as i32;
    let len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
    // SAFETY: sll is a valid sockaddr_ll of `len` bytes.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            len,
        )
    })?;
    Ok((fd, sll))
}

/// MAC of `iface` in the calling thread's namespace.
fn own_mac(iface: &str) -> io::Result<[u8; 6]> {
    let (fd, _) = packet_socket(iface, 0)?;
    let mut me: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    let mut me_len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
    // SAFETY: `me` has room for a sockaddr_ll.
    check(unsafe {
        libc::getsockname(
            fd.as_raw_fd(),
            (&mut me as *mut libc::sockaddr_ll).cast(),
            &mut me_len,
        )
    })?;
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&me.sll_addr[..6]);
    Ok(mac)
}
