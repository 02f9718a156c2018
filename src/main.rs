//! The `vipflow` command: a thin shell over the library (config, logging, dispatch).

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use vipflow::agent;
use vipflow::agent::status::StatusDoc;
use vipflow::config::{
    BridgeConfig, Config, GatewayMode, LogFormat, Profile, format_mac, parse_mac, parse_u16,
};
use vipflow::source::file;

/// vipflow keeps the OpenFlow flows on Open vSwitch bridges (br-ex, br-provider) that make
/// Kubernetes Service external IPs and LoadBalancer VIPs work on OVS/OVN clusters: ARP and ND
/// requests for each VIP bypass OVN to the host, VIP traffic is steered into OVN and back.
///
/// Every flow vipflow writes carries its cookie prefix; flows of other owners are never
/// touched. Check the result with `ovs-ofctl -O OpenFlow13 dump-flows br-ex`.
#[derive(Parser, Debug)]
#[command(
    name = "vipflow",
    version,
    propagate_version = true,
    max_term_width = 100
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run continuously: re-read the objects file when it changes and keep every bridge's flows
    /// in step (reconnecting and resyncing after an OVS restart). Stops on SIGINT/SIGTERM,
    /// leaving the flows in place.
    Agent {
        /// Sync once, report, and exit (non-zero if a bridge could not be synced).
        #[arg(long)]
        once: bool,
        /// How often to check the objects file for changes.
        #[arg(long, value_name = "MS", default_value_t = 500)]
        poll_interval_ms: u64,
    },
    /// Print the desired flows for the objects, in `ovs-ofctl add-flow` syntax with port
    /// names, without connecting to anything. Skipped input is listed on stderr.
    Plan,
    /// Connect to each bridge (and the Northbound database, if configured) and compare with
    /// the plan: print missing (+), unexpected (-) and differing (~) flows and rows; exit 1 on
    /// drift, 0 when everything matches.
    Verify,
    /// Report every VIP that IPAM could hand to a pod: inside a Kube-OVN Subnet (from the
    /// objects file) but not in its excludeIps, or inside a logical switch's subnet (with
    /// --nb-remote) but not in its exclude_ips. Exit 1 when there is any.
    Check,
    /// Print what a running agent holds (VIPs, their Services, flows per bridge, Northbound
    /// rows, problems), read from its HTTP endpoint (--http-addr).
    Status,
}

#[derive(Args, Debug)]
struct Global {
    /// Config file (YAML or JSON; keys as the long flags, bridges as a list). Flags override it.
    #[arg(
        short,
        long,
        env = "VIPFLOW_CONFIG",
        global = true,
        value_name = "FILE"
    )]
    config: Option<PathBuf>,
    /// Kubernetes objects file: a List (kubectl get svc,endpointslices,nodes -A -o yaml), YAML
    /// or JSON.
    #[arg(long, env = "VIPFLOW_OBJECTS", global = true, value_name = "FILE")]
    objects: Option<PathBuf>,
    /// This node's name (VIPs equal to a node address are rejected).
    #[arg(long, env = "NODE_NAME", global = true)]
    node_name: Option<String>,
    /// Directory holding the bridges' OpenFlow management sockets (<bridge>.mgmt).
    #[arg(long, env = "OVS_RUNDIR", global = true, value_name = "DIR")]
    ovs_rundir: Option<PathBuf>,
    /// The node's OVS database, where port names are resolved and default ports found
    /// (unix:PATH or tcp:HOST:PORT) [default: unix:<ovs-rundir>/db.sock].
    #[arg(long, global = true, value_name = "REMOTE")]
    ovs_db: Option<String>,
    /// Top 16 bits of every cookie vipflow writes (e.g. 0x7f1f); flows are owned by it.
    #[arg(long, global = true, value_parser = parse_u16, value_name = "PREFIX")]
    cookie_prefix: Option<u16>,
    /// Take LoadBalancer ingress IPs only from Services with this spec.loadBalancerClass
    /// (externalIPs are always taken).
    #[arg(long, global = true, value_name = "CLASS")]
    load_balancer_class: Option<String>,
    /// Log format.
    #[arg(long, global = true, value_enum)]
    log_format: Option<LogFormat>,
    /// Milliseconds to wait for an OpenFlow reply (bundle commit, BARRIER, flow dump) before
    /// the connection is dropped with a WARN and a new one resyncs [default: 10000].
    #[arg(long, global = true, value_name = "MS")]
    openflow_timeout_ms: Option<u64>,
    /// Read vipflow's flows back every MS milliseconds and repair what someone else deleted or
    /// changed; 0 turns it off. With a switch that keeps a flow monitor (Open vSwitch 3.0+),
    /// changes are heard and put back at once and this read-back runs at most every 30 s.
    /// Stretched to 20x the read's own cost on big tables [default: 500].
    #[arg(long, global = true, value_name = "MS")]
    flow_audit_ms: Option<u64>,
    /// Milliseconds to wait for a Northbound reply (transaction, monitor, writer-token read)
    /// before the session is dropped with a WARN and made again [default: 10000].
    #[arg(long, global = true, value_name = "MS")]
    nb_timeout_ms: Option<u64>,
    /// Largest objects file read, in bytes; a larger one is refused with an error and the last
    /// good objects stay in force [default: 67108864 (64 MiB)].
    #[arg(long, global = true, value_name = "BYTES")]
    objects_max_bytes: Option<u64>,
    /// Log filter (tracing EnvFilter syntax, e.g. info or vipflow=debug).
    #[arg(long, env = "VIPFLOW_LOG", global = true, default_value = "info")]
    log: String,

    #[command(flatten)]
    bridge: BridgeFlags,

    #[command(flatten)]
    northbound: NorthboundFlags,

    #[command(flatten)]
    cluster: ClusterFlags,
}

/// Running in a cluster: the Kubernetes API, leader election, Events, the HTTP endpoint.
#[derive(Args, Debug, Default)]
struct ClusterFlags {
    /// kubeconfig to use (default: in-cluster service account, else ~/.kube/config). Used when
    /// no --objects file is given.
    #[arg(long, env = "KUBECONFIG", global = true, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Serve /metrics, /healthz, /readyz and /status on this address (e.g. 0.0.0.0:9475);
    /// `vipflow status` reads it.
    #[arg(long, env = "VIPFLOW_HTTP_ADDR", global = true, value_name = "ADDR")]
    http_addr: Option<String>,
    /// Let every agent with --nb-remote write Northbound rows (no Lease election).
    #[arg(long, global = true)]
    no_leader_election: bool,
    /// Namespace of the Lease [default: POD_NAMESPACE, else default].
    #[arg(long, global = true, value_name = "NS")]
    lease_namespace: Option<String>,
    /// Name of the Lease [default: vipflow-northbound].
    #[arg(long, global = true, value_name = "NAME")]
    lease_name: Option<String>,
    /// Seconds after which a crashed writer is replaced [default: 4].
    #[arg(long, global = true, value_name = "SECONDS")]
    lease_duration: Option<u64>,
    /// Identity in the Lease [default: POD_NAME, else the node name].
    #[arg(long, env = "POD_NAME", global = true)]
    identity: Option<String>,
    /// The pod's namespace (downward API), the default Lease namespace.
    #[arg(long, env = "POD_NAMESPACE", global = true, hide = true)]
    pod_namespace: Option<String>,
    /// Kubernetes Events per second at most (bursts up to --event-burst).
    #[arg(long, global = true, default_value_t = 5.0)]
    event_rate: f64,
    #[arg(long, global = true, default_value_t = 20)]
    event_burst: u32,
}

/// OVN Northbound settings: where the database is and how Load_Balancer rows look.
#[derive(Args, Debug, Default)]
struct NorthboundFlags {
    /// OVN Northbound database (unix:PATH, or tcp:IP:6641,tcp:IP:6641,... for a cluster). When
    /// set, vipflow also keeps each Service's Load_Balancer rows there.
    #[arg(long, env = "OVN_NB_DB", global = true, value_name = "REMOTES")]
    nb_remote: Option<String>,
    /// Load_Balancer_Group that cluster-scope rows join (otherwise, with a node template,
    /// vipflow's own group vipflow-cluster, attached to every node's router and switch).
    #[arg(long, global = true, value_name = "NAME")]
    lb_group: Option<String>,
    /// Logical switch cluster-scope rows and ETP=Local's switch rows attach to (repeatable).
    #[arg(long = "nb-switch", global = true, value_name = "NAME")]
    nb_switches: Vec<String>,
    /// Logical router cluster-scope rows attach to (repeatable).
    #[arg(long = "nb-router", global = true, value_name = "NAME")]
    nb_routers: Vec<String>,
    /// Gateway router of each node, where VIP traffic lands: node-scoped rows and (through
    /// vipflow's group) cluster rows go there; {node} is replaced (e.g. GR_{node}).
    #[arg(long, global = true, value_name = "TEMPLATE")]
    node_router: Option<String>,
    /// Switch of each node (pod traffic): prefer-local rows, ETP=Local's switch rows and
    /// (through vipflow's group) cluster rows go there; {node} is replaced (e.g. {node}).
    #[arg(long, global = true, value_name = "TEMPLATE")]
    node_switch: Option<String>,
    /// prefer-local for every Service: a node's own endpoints when it has any, else all (per
    /// Service: annotation vipflow.io/prefer-local: "true").
    #[arg(long, global = true)]
    prefer_local: bool,
    /// options:hairpin_snat_ip for every row.
    #[arg(long, global = true, value_name = "IP")]
    hairpin_snat_ip: Option<String>,
    /// Kube-OVN dialect: prefer-local through options:prefer_local_backend and ip_port_mappings
    /// (read by Kube-OVN's patched OVN).
    #[arg(long, global = true)]
    kube_ovn: bool,
    /// Leave logical switches' other_config:exclude_ips alone (by default vipflow keeps every
    /// VIP out of the IPAM of the switches whose subnet holds it).
    #[arg(long, global = true)]
    no_exclude_ips: bool,
}

impl NorthboundFlags {
    fn apply(&self, cfg: &mut Config) {
        if let Some(v) = &self.nb_remote {
            cfg.nb_remote = Some(v.clone());
        }
        let nb = &mut cfg.northbound;
        if let Some(v) = &self.lb_group {
            nb.lb_group = Some(v.clone());
        }
        if !self.nb_switches.is_empty() {
            nb.switches = self.nb_switches.clone();
        }
        if !self.nb_routers.is_empty() {
            nb.routers = self.nb_routers.clone();
        }
        if let Some(v) = &self.node_router {
            nb.node_router = Some(v.clone());
        }
        if let Some(v) = &self.node_switch {
            nb.node_switch = Some(v.clone());
        }
        nb.prefer_local |= self.prefer_local;
        if let Some(v) = &self.hairpin_snat_ip {
            nb.hairpin_snat_ip = Some(v.clone());
        }
        nb.kube_ovn |= self.kube_ovn;
        if self.no_exclude_ips {
            nb.exclude_ips = false;
        }
    }
}

/// Per-bridge settings. They apply to the bridge chosen with --bridge (which then becomes the
/// only bridge), or to the single configured bridge.
#[derive(Args, Debug, Default)]
struct BridgeFlags {
    /// Program only this bridge (default: the bridges of the config file, else br-ex).
    #[arg(long, global = true, value_name = "NAME")]
    bridge: Option<String>,
    /// OpenFlow target of the bridge: unix:PATH or tcp:HOST:PORT (default:
    /// unix:<ovs-rundir>/<bridge>.mgmt).
    #[arg(long, global = true, value_name = "TARGET")]
    target: Option<String>,
    /// gateway (br-ex in front of OVN's gateway router) or underlay (br-provider).
    #[arg(long, global = true, value_enum)]
    profile: Option<Profile>,
    /// Uplink (physical NIC) port, by its full OVS name [default: the bridge's one port that
    /// is neither internal nor a patch port, from the OVS database; the bridge must be in
    /// ovn-bridge-mappings].
    #[arg(long, global = true, value_name = "PORT")]
    uplink: Option<String>,
    /// Patch port towards br-int, by its full OVS name (e.g. patch-br-ex_node-a-to-br-int)
    /// [default: the localnet patch port ovn-controller made on the bridge, from the OVS
    /// database].
    #[arg(long, global = true, value_name = "PORT")]
    patch: Option<String>,
    /// shared: steer VIP traffic into OVN and back; local: only the ARP/ND bypass.
    #[arg(long, global = true, value_enum)]
    gateway_mode: Option<GatewayMode>,
    /// VLAN ID of a tagged uplink (bypass flows match it and pop the tag).
    #[arg(long, global = true, value_name = "VID")]
    vlan: Option<u16>,
    /// OpenFlow table for vipflow's flows [default: 0].
    #[arg(long, global = true)]
    table: Option<u8>,
    /// Priority of vipflow's flows [default: 500].
    #[arg(long, global = true)]
    priority: Option<u16>,
    /// The bridge's MAC for the return path (default: learned from the LOCAL port).
    #[arg(long, global = true, value_parser = parse_mac, value_name = "MAC")]
    bridge_mac: Option<[u8; 6]>,
    /// Underlay profile: MAC of the OVN router port VIP traffic is rewritten to.
    #[arg(long, global = true, value_parser = parse_mac, value_name = "MAC")]
    router_mac: Option<[u8; 6]>,
}

impl BridgeFlags {
    fn any_setting(&self) -> bool {
        self.target.is_some()
            || self.profile.is_some()
            || self.uplink.is_some()
            || self.patch.is_some()
            || self.gateway_mode.is_some()
            || self.vlan.is_some()
            || self.table.is_some()
            || self.priority.is_some()
            || self.bridge_mac.is_some()
            || self.router_mac.is_some()
    }

    fn apply(&self, b: &mut BridgeConfig) {
        if let Some(v) = &self.target {
            b.target = Some(v.clone());
        }
        if let Some(v) = self.profile {
            b.profile = v;
        }
        if let Some(v) = &self.uplink {
            b.uplink = Some(v.clone());
        }
        if let Some(v) = &self.patch {
            b.patch = Some(v.clone());
        }
        if let Some(v) = self.gateway_mode {
            b.gateway_mode = v;
        }
        if let Some(v) = self.vlan {
            b.vlan = Some(v);
        }
        if let Some(v) = self.table {
            b.table = v;
        }
        if let Some(v) = self.priority {
            b.priority = v;
        }
        if let Some(v) = self.bridge_mac {
            b.bridge_mac = Some(v);
        }
        if let Some(v) = self.router_mac {
            b.router_mac = Some(v);
        }
    }
}

fn build_config(g: &Global) -> Result<Config, String> {
    let mut cfg = match &g.config {
        Some(p) => Config::load(p).map_err(|e| e.to_string())?,
        None => Config::default(),
    };
    if let Some(v) = &g.objects {
        cfg.objects = Some(v.clone());
    }
    if let Some(v) = &g.node_name {
        cfg.node_name = v.clone();
    }
    if let Some(v) = &g.ovs_rundir {
        cfg.ovs_rundir = v.clone();
    }
    if let Some(v) = &g.ovs_db {
        cfg.ovs_db = Some(v.clone());
    }
    if let Some(v) = g.cookie_prefix {
        cfg.cookie_prefix = v;
    }
    if let Some(v) = &g.load_balancer_class {
        cfg.load_balancer_class = Some(v.clone());
    }
    if let Some(v) = g.log_format {
        cfg.log_format = v;
    }
    if let Some(v) = g.openflow_timeout_ms {
        cfg.openflow_timeout_ms = v;
    }
    if let Some(v) = g.flow_audit_ms {
        cfg.flow_audit_ms = v;
    }
    if let Some(v) = g.nb_timeout_ms {
        cfg.nb_timeout_ms = v;
    }
    if let Some(v) = g.objects_max_bytes {
        cfg.objects_max_bytes = v;
    }
    g.northbound.apply(&mut cfg);
    let c = &g.cluster;
    if let Some(v) = &c.http_addr {
        cfg.http_addr = Some(v.clone());
    }
    if c.no_leader_election {
        cfg.lease.enabled = false;
    }
    if let Some(v) = &c.lease_namespace {
        cfg.lease.namespace = Some(v.clone());
    }
    if let Some(v) = &c.lease_name {
        cfg.lease.name = v.clone();
    }
    if let Some(v) = c.lease_duration {
        cfg.lease.duration_seconds = v;
    }
    if let Some(name) = &g.bridge.bridge {
        let b = cfg
            .bridges
            .iter()
            .find(|b| &b.name == name)
            .cloned()
            .unwrap_or_else(|| BridgeConfig {
                name: name.clone(),
                ..BridgeConfig::default()
            });
        cfg.bridges = vec![b];
    }
    if g.bridge.any_setting() {
        if cfg.bridges.len() != 1 {
            return Err(format!(
                "{} bridges are configured: choose one with --bridge to apply per-bridge flags",
                cfg.bridges.len()
            ));
        }
        g.bridge.apply(&mut cfg.bridges[0]);
    }
    cfg.validate().map_err(|e| e.to_string())?;
    Ok(cfg)
}

fn init_logging(format: LogFormat, filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only on a terminal: log files and collectors get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

fn load_objects(cfg: &Config) -> Result<file::Loaded, String> {
    let path = agent::objects_path(cfg).map_err(|e| e.to_string())?;
    file::load(&path, cfg.objects_max_bytes).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let cfg = match build_config(&cli.global) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("vipflow: {e}");
            return ExitCode::from(2);
        }
    };
    if matches!(cli.command, Command::Agent { .. })
        && let Err(e) = cfg.validate_nb_writer()
    {
        eprintln!("vipflow: {e}");
        return ExitCode::from(2);
    }
    init_logging(cfg.log_format, &cli.global.log);
    if matches!(cli.command, Command::Agent { .. }) && cfg.node_name.is_empty() {
        tracing::warn!(
            "no --node-name (env NODE_NAME): this node's endpoints and addresses are unknown, so externalTrafficPolicy Local and prefer-local cannot tell local endpoints, and VIPs equal to a node address are not caught; set it to the Kubernetes Node's name"
        );
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("vipflow: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = match rt.block_on(dispatch(cli.command, cfg, cli.global.cluster)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("vipflow: {e}");
            ExitCode::FAILURE
        }
    };
    // A parse of a big objects file still running on a blocking thread must not hold up
    // the exit: its result is no longer wanted.
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    code
}

async fn dispatch(cmd: Command, cfg: Config, cluster: ClusterFlags) -> Result<ExitCode, String> {
    match cmd {
        Command::Plan => {
            let loaded = load_objects(&cfg)?;
            let (model, problems) = agent::build_model(&cfg, &loaded);
            for p in &problems {
                eprintln!("skipped: {p}");
            }
            for (b, flows) in agent::plan_bridges(&cfg, &model) {
                println!("# bridge {} ({} flows)", b.name, flows.len());
                for f in &flows {
                    println!("{}", f.display(&b));
                }
            }
            let rows = agent::plan_northbound(&cfg, &model);
            println!("# northbound Load_Balancer rows ({})", rows.len());
            for r in &rows {
                println!("{r}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Status => {
            let addr = cfg
                .http_addr
                .clone()
                .ok_or("give the agent's --http-addr (e.g. 127.0.0.1:9475)")?;
            match fetch_status(&addr).await? {
                Some(doc) => print!("{doc}"),
                None => println!("the agent at {addr} has no plan yet"),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Check => {
            let loaded = load_objects(&cfg)?;
            let findings = agent::check(&cfg, &loaded.objects)
                .await
                .map_err(|e| e.to_string())?;
            for f in &findings {
                println!("{f}");
            }
            if findings.is_empty() {
                println!("no VIP is exposed to IPAM");
                Ok(ExitCode::SUCCESS)
            } else {
                Ok(ExitCode::from(1))
            }
        }
        Command::Verify => {
            let loaded = load_objects(&cfg)?;
            let drifts = agent::verify(&cfg, &loaded.objects)
                .await
                .map_err(|e| e.to_string())?;
            let mut drift = false;
            for d in drifts {
                for s in &d.skipped {
                    eprintln!("{}: not programmable: {s}", d.bridge);
                }
                if d.is_empty() {
                    println!("{}: in sync", d.bridge);
                    continue;
                }
                drift = true;
                println!(
                    "{}: drift ({} missing, {} unexpected)",
                    d.bridge,
                    d.missing.len(),
                    d.extra.len()
                );
                for f in &d.missing {
                    println!("+ {f}");
                }
                for f in &d.extra {
                    println!("- {f}");
                }
            }
            let nb = agent::verify_northbound(&cfg, &loaded.objects)
                .await
                .map_err(|e| e.to_string())?;
            if let Some(lines) = nb {
                if lines.is_empty() {
                    println!("northbound: in sync");
                } else {
                    drift = true;
                    println!("northbound: drift ({} differences)", lines.len());
                    for l in &lines {
                        println!("{l}");
                    }
                }
            }
            Ok(if drift {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Agent { once: true, .. } => {
            let loaded = load_objects(&cfg)?;
            for p in loaded.problems.iter() {
                tracing::warn!(problem = %p, "skipped");
            }
            let (_, problems) = agent::build_model(&cfg, &loaded);
            for p in problems.iter().skip(loaded.problems.len()) {
                tracing::warn!(problem = %p, "skipped");
            }
            let reports = agent::sync_once(&cfg, &loaded.objects)
                .await
                .map_err(|e| e.to_string())?;
            for r in reports {
                for s in &r.skipped {
                    tracing::warn!(bridge = %r.bridge, "not programmed: {s}");
                }
                tracing::info!(bridge = %r.bridge, changes = r.changes, flows = r.flows, "synced once");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Agent {
            once: false,
            poll_interval_ms,
        } => {
            if let Some(b) = cfg.bridges.iter().find_map(|b| b.bridge_mac) {
                tracing::debug!(bridge_mac = %format_mac(&b), "configured bridge MAC");
            }
            if cfg.objects.is_some() {
                agent::run(cfg, Duration::from_millis(poll_interval_ms.max(10)))
                    .await
                    .map_err(|e| e.to_string())?;
            } else {
                if cfg.node_name.is_empty() {
                    return Err(
                        "in a cluster the node name is required (--node-name or NODE_NAME)".into(),
                    );
                }
                let c = &cluster;
                let opts = agent::ClusterOptions {
                    kubeconfig: c.kubeconfig.clone(),
                    identity: c.identity.clone().unwrap_or_else(|| cfg.node_name.clone()),
                    namespace: c.pod_namespace.clone().unwrap_or_else(|| "default".into()),
                    events_per_second: c.event_rate.max(0.01),
                    events_burst: c.event_burst.max(1),
                };
                agent::run_cluster(cfg, opts)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// GET /status from a running agent (plain HTTP/1.0 over TCP: no client library needed).
async fn fetch_status(addr: &str) -> Result<Option<StatusDoc>, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let connect = tokio::net::TcpStream::connect(addr);
    let mut s = tokio::time::timeout(Duration::from_secs(5), connect)
        .await
        .map_err(|_| format!("connect {addr}: timed out"))?
        .map_err(|e| {
            format!("connect {addr}: {e} (is the agent running with --http-addr {addr}?)")
        })?;
    s.write_all(format!("GET /status HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .map_err(|e| format!("{addr}: {e}"))?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .map_err(|_| format!("{addr}: no answer"))?
        .map_err(|e| format!("{addr}: {e}"))?;
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{addr}: not an HTTP answer"))?;
    if !head.starts_with("HTTP/1.") || head.split_whitespace().nth(1).is_none_or(|c| c != "200") {
        return Err(format!("{addr}: {}", head.lines().next().unwrap_or("")));
    }
    serde_json::from_str(body).map_err(|e| format!("{addr}: bad status document: {e}"))
}
