//! The wire of an FRR daemon's own vty socket (`bgpd.vty` in FRR's socket directory), as
//! vtysh speaks it to each daemon: a command goes as its text and a NUL; the daemon answers
//! with its output, three NULs and a status byte (0: done; else FRR's `CMD_*` code, the output
//! saying why). A call on an open session is far cheaper than starting `vtysh` for it.

/// One command as it goes on the socket.
pub fn command(line: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(line.len() + 1);
    b.extend_from_slice(line.as_bytes());
    b.push(0);
    b
}

/// One whole answer at the start of `buf`: its output, its status, and how many bytes it
/// took; `None` while it is not all there.
pub fn answer(buf: &[u8]) -> Option<(String, u8, usize)> {
    let end = buf.windows(3).position(|w| w == [0, 0, 0])?;
    let status = *buf.get(end + 3)?;
    Some((
        String::from_utf8_lossy(&buf[..end]).into_owned(),
        status,
        end + 4,
    ))
}

/// The commands that apply `batch` (configuration lines as `vtysh -f` takes them, one
/// daemon's) on a daemon's vty: into configuration mode, every line, back out.
pub fn batch_commands(batch: &str) -> Vec<&str> {
    let mut out = vec!["enable", "configure terminal"];
    out.extend(
        batch
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && *l != "!"),
    );
    out.push("end");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_ends_in_a_nul_and_an_answer_in_three_and_a_status() {
        assert_eq!(command("end"), b"end\0");
        assert_eq!(answer(b"partial output"), None);
        assert_eq!(answer(b"out\0\0\0"), None, "no status byte yet");
        assert_eq!(answer(b"\0\0\0\0rest"), Some((String::new(), 0, 4)));
        assert_eq!(
            answer(b"% Can't find static route specified\n\0\0\0\x0dnext"),
            Some(("% Can't find static route specified\n".into(), 13, 40))
        );
    }

    #[test]
    fn a_batch_goes_in_between_configure_and_end() {
        let batch = "router bgp 64513\n address-family ipv4 unicast\n  network 198.51.100.1/32\n exit-address-family\n!\nexit\n";
        assert_eq!(
            batch_commands(batch),
            [
                "enable",
                "configure terminal",
                "router bgp 64513",
                "address-family ipv4 unicast",
                "network 198.51.100.1/32",
                "exit-address-family",
                "exit",
                "end"
            ]
        );
    }
}
