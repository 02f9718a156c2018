//! The command line: what each flag and subcommand means (clap). Merging the flags over the
//! config file is [`super::merge`].

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use vipflow::config::{GatewayMode, LogFormat, Profile, parse_mac, parse_u16};

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
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
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
    /// names, without connecting to anything. Input that was skipped, ignored (an unknown field)
    /// or is not supported is listed on stderr, each line headed by which.
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
    /// Started by an announcing agent with the membership, not by hand: reads the VIPs the
    /// agent answers for on standard input and, when that input ends (the agent is gone,
    /// however it went), deletes those ARP/ND answers from the bridges, so that a dead agent's
    /// node stops answering.
    #[command(hide = true)]
    Fence {
        /// An announcing bridge's OpenFlow target (as the agent connects to it); repeated.
        #[arg(long, required = true)]
        target: Vec<String>,
        /// The agent's cookie prefix (its flows' cookies' top 16 bits).
        #[arg(long, value_parser = parse_u16)]
        cookie_prefix: u16,
    },
}

#[derive(Args, Debug)]
pub(crate) struct Global {
    /// Config file (YAML or JSON; keys as the long flags, bridges as a list). Flags override it.
    #[arg(
        short,
        long,
        env = "VIPFLOW_CONFIG",
        global = true,
        value_name = "FILE"
    )]
    pub(crate) config: Option<PathBuf>,
    /// Kubernetes objects file: a List (kubectl get svc,endpointslices,nodes -A -o yaml), YAML
    /// or JSON (-o json: parses several times faster, for large clusters).
    #[arg(long, env = "VIPFLOW_OBJECTS", global = true, value_name = "FILE")]
    pub(crate) objects: Option<PathBuf>,
    /// This node's name (VIPs equal to a node address are rejected).
    #[arg(long, env = "NODE_NAME", global = true)]
    pub(crate) node_name: Option<String>,
    /// Directory holding the bridges' OpenFlow management sockets (<bridge>.mgmt).
    #[arg(long, env = "OVS_RUNDIR", global = true, value_name = "DIR")]
    pub(crate) ovs_rundir: Option<PathBuf>,
    /// The node's OVS database, where port names are resolved and default ports found
    /// (unix:PATH or tcp:HOST:PORT) [default: unix:<ovs-rundir>/db.sock].
    #[arg(long, global = true, value_name = "REMOTE")]
    pub(crate) ovs_db: Option<String>,
    /// Top 16 bits of every cookie vipflow writes (e.g. 0x7f1f); flows are owned by it.
    #[arg(long, global = true, value_parser = parse_u16, value_name = "PREFIX")]
    pub(crate) cookie_prefix: Option<u16>,
    /// Take LoadBalancer ingress IPs only from Services with this spec.loadBalancerClass
    /// (externalIPs are always taken).
    #[arg(long, global = true, value_name = "CLASS")]
    pub(crate) load_balancer_class: Option<String>,
    /// Allocate addresses to LoadBalancer Services from VipPools (cluster mode): the elected
    /// agent writes each Service's status.loadBalancer.ingress, keeps it stable, and reports
    /// each decision as an Event.
    #[arg(long, global = true)]
    pub(crate) allocate_ips: bool,
    /// Log format.
    #[arg(long, global = true, value_enum)]
    pub(crate) log_format: Option<LogFormat>,
    /// Milliseconds to wait for an OpenFlow reply (bundle commit, BARRIER, flow dump) before
    /// the connection is dropped with a WARN and a new one resyncs [default: 10000].
    #[arg(long, global = true, value_name = "MS")]
    pub(crate) openflow_timeout_ms: Option<u64>,
    /// Read vipflow's flows back every MS milliseconds and repair what someone else deleted or
    /// changed; 0 turns it off. With a switch that keeps a flow monitor (Open vSwitch 3.0+),
    /// changes are heard and put back at once and this read-back runs at most every 30 s.
    /// Stretched to 20x the read's own cost on big tables [default: 500].
    #[arg(long, global = true, value_name = "MS")]
    pub(crate) flow_audit_ms: Option<u64>,
    /// Milliseconds to wait for a Northbound reply (transaction, monitor, writer-token read)
    /// before the session is dropped with a WARN and made again [default: 10000].
    #[arg(long, global = true, value_name = "MS")]
    pub(crate) nb_timeout_ms: Option<u64>,
    /// Largest objects file read, in bytes; a larger one is refused with an error and the last
    /// good objects stay in force [default: 67108864 (64 MiB)].
    #[arg(long, global = true, value_name = "BYTES")]
    pub(crate) objects_max_bytes: Option<u64>,
    /// Log filter (tracing EnvFilter syntax, e.g. info or vipflow=debug).
    #[arg(long, env = "VIPFLOW_LOG", global = true, default_value = "info")]
    pub(crate) log: String,

    #[command(flatten)]
    pub(crate) bridge: BridgeFlags,

    #[command(flatten)]
    pub(crate) northbound: NorthboundFlags,

    #[command(flatten)]
    pub(crate) cluster: ClusterFlags,
}

/// Running in a cluster: the Kubernetes API, leader election, Events, the HTTP endpoint.
#[derive(Args, Debug, Default)]
pub(crate) struct ClusterFlags {
    /// kubeconfig to use (default: in-cluster service account, else ~/.kube/config). Used when
    /// no --objects file is given.
    #[arg(long, env = "KUBECONFIG", global = true, value_name = "FILE")]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// Serve /metrics, /healthz, /readyz and /status on this address (e.g. 0.0.0.0:9475);
    /// `vipflow status` reads it.
    #[arg(long, env = "VIPFLOW_HTTP_ADDR", global = true, value_name = "ADDR")]
    pub(crate) http_addr: Option<String>,
    /// Let every agent with --nb-remote write Northbound rows (no Lease election).
    #[arg(long, global = true)]
    pub(crate) no_leader_election: bool,
    /// Namespace of the Lease [default: POD_NAMESPACE, else default].
    #[arg(long, global = true, value_name = "NS")]
    pub(crate) lease_namespace: Option<String>,
    /// Name of the Lease [default: vipflow-northbound].
    #[arg(long, global = true, value_name = "NAME")]
    pub(crate) lease_name: Option<String>,
    /// Seconds after which a crashed writer is replaced [default: 4].
    #[arg(long, global = true, value_name = "SECONDS")]
    pub(crate) lease_duration: Option<u64>,
    /// The membership's shared secret (a file of at least 16 bytes, e.g. a mounted Secret):
    /// with --announce, the nodes find out who is alive among themselves in well under a
    /// second (SWIM over UDP) instead of waiting for the Nodes' Ready condition.
    #[arg(long, global = true, value_name = "FILE")]
    pub(crate) membership_key_file: Option<PathBuf>,
    /// UDP port of the membership [default: 7947].
    #[arg(long, global = true, value_name = "PORT")]
    pub(crate) membership_port: Option<u16>,
    /// The address other nodes reach this one's membership at [default: this node's
    /// InternalIP].
    #[arg(long, global = true, value_name = "IP")]
    pub(crate) membership_address: Option<std::net::IpAddr>,
    /// Directory of the node's FRR vty sockets (e.g. /var/run/frr, shared with an FRR
    /// sidecar): this node then advertises the VIPs of the pools a BGPAdvertisement selects
    /// through that FRR, configured from the BGPPeer and BFDProfile objects. Unset: no BGP.
    #[arg(
        long,
        env = "VIPFLOW_FRR_SOCKET_DIR",
        global = true,
        value_name = "DIR"
    )]
    pub(crate) frr_socket_dir: Option<PathBuf>,
    /// The vtysh program that gives the node's FRR its configuration (the prefixes go over
    /// bgpd's own vty socket in --frr-socket-dir) [default: vtysh].
    #[arg(long, global = true, value_name = "PATH")]
    pub(crate) vtysh: Option<PathBuf>,
    /// Advertise through frr-k8s instead of driving FRR: write FRRConfiguration objects in
    /// --frr-k8s-namespace that frr-k8s merges into the node's FRR (beside MetalLB's and
    /// OVN-Kubernetes's). auto (the default): where frr-k8s runs on this node (its
    /// FRRNodeState exists when the agent starts); on; off. See docs/BGP.md.
    #[arg(
        long,
        env = "VIPFLOW_FRR_K8S",
        global = true,
        value_enum,
        value_name = "MODE"
    )]
    pub(crate) frr_k8s: Option<vipflow::config::FrrK8sMode>,
    /// The namespace frr-k8s runs in and reads FRRConfigurations from [default:
    /// frr-k8s-system].
    #[arg(
        long,
        env = "VIPFLOW_FRR_K8S_NAMESPACE",
        global = true,
        value_name = "NS"
    )]
    pub(crate) frr_k8s_namespace: Option<String>,
    /// Identity in the Lease [default: POD_NAME, else the node name].
    #[arg(long, env = "POD_NAME", global = true)]
    pub(crate) identity: Option<String>,
    /// The pod's namespace (downward API), the default Lease namespace.
    #[arg(long, env = "POD_NAMESPACE", global = true, hide = true)]
    pub(crate) pod_namespace: Option<String>,
    /// Kubernetes Events per second at most (bursts up to --event-burst).
    #[arg(long, global = true, default_value_t = 5.0)]
    pub(crate) event_rate: f64,
    #[arg(long, global = true, default_value_t = 20)]
    pub(crate) event_burst: u32,
}

/// OVN Northbound settings: where the database is and how Load_Balancer rows look.
#[derive(Args, Debug, Default)]
pub(crate) struct NorthboundFlags {
    /// OVN Northbound database (unix:PATH, or tcp:IP:6641,tcp:IP:6641,... for a cluster). When
    /// set, vipflow also keeps each Service's Load_Balancer rows there.
    #[arg(long, env = "OVN_NB_DB", global = true, value_name = "REMOTES")]
    pub(crate) nb_remote: Option<String>,
    /// Load_Balancer_Group that cluster-scope rows join (otherwise, with a node template,
    /// vipflow's own group vipflow-cluster, attached to every node's router and switch).
    #[arg(long, global = true, value_name = "NAME")]
    pub(crate) lb_group: Option<String>,
    /// Logical switch cluster-scope rows and ETP=Local's switch rows attach to (repeatable).
    #[arg(long = "nb-switch", global = true, value_name = "NAME")]
    pub(crate) nb_switches: Vec<String>,
    /// Logical router cluster-scope rows attach to (repeatable).
    #[arg(long = "nb-router", global = true, value_name = "NAME")]
    pub(crate) nb_routers: Vec<String>,
    /// Gateway router of each node, where VIP traffic lands: node-scoped rows and (through
    /// vipflow's group) cluster rows go there; {node} is replaced (e.g. GR_{node}).
    #[arg(long, global = true, value_name = "TEMPLATE")]
    pub(crate) node_router: Option<String>,
    /// Switch of each node (pod traffic): prefer-local rows, ETP=Local's switch rows and
    /// (through vipflow's group) cluster rows go there; {node} is replaced (e.g. {node}).
    #[arg(long, global = true, value_name = "TEMPLATE")]
    pub(crate) node_switch: Option<String>,
    /// prefer-local for every Service: a node's own endpoints when it has any, else all (per
    /// Service: annotation vipflow.io/prefer-local: "true").
    #[arg(long, global = true)]
    pub(crate) prefer_local: bool,
    /// How externalTrafficPolicy Local's gateway router rows are written: per-node (one row
    /// per Service per node), template (one row per Service whose IPv4 backends each
    /// chassis expands from its Chassis_Template_Var row; needs OVN 22.12 or later; IPv6
    /// VIPs keep per-node rows), or auto (the default: template where the Northbound
    /// database has Chassis_Template_Var, read when the agent starts; per-node otherwise).
    /// See docs/TEMPLATES.md.
    #[arg(long, global = true, value_enum, value_name = "MODE")]
    pub(crate) node_rows: Option<vipflow::plan::node_template::NodeRows>,
    /// options:hairpin_snat_ip for every row.
    #[arg(long, global = true, value_name = "IP")]
    pub(crate) hairpin_snat_ip: Option<String>,
    /// Kube-OVN dialect: prefer-local through options:prefer_local_backend and ip_port_mappings
    /// (read by Kube-OVN's patched OVN).
    #[arg(long, global = true)]
    pub(crate) kube_ovn: bool,
    /// Leave logical switches' other_config:exclude_ips alone (by default vipflow keeps every
    /// VIP out of the IPAM of the switches whose subnet holds it).
    #[arg(long, global = true)]
    pub(crate) no_exclude_ips: bool,
}

/// Per-bridge settings. They apply to the bridge chosen with --bridge (which then becomes the
/// only bridge), or to the single configured bridge.
#[derive(Args, Debug, Default)]
pub(crate) struct BridgeFlags {
    /// Program only this bridge (default: the bridges of the config file, else br-ex).
    #[arg(long, global = true, value_name = "NAME")]
    pub(crate) bridge: Option<String>,
    /// OpenFlow target of the bridge: unix:PATH or tcp:HOST:PORT (default:
    /// unix:<ovs-rundir>/<bridge>.mgmt).
    #[arg(long, global = true, value_name = "TARGET")]
    pub(crate) target: Option<String>,
    /// gateway (br-ex in front of OVN's gateway router) or underlay (br-provider).
    #[arg(long, global = true, value_enum)]
    pub(crate) profile: Option<Profile>,
    /// Uplink (physical NIC) port, by its full OVS name [default: the bridge's one port that
    /// is neither internal nor a patch port, from the OVS database; the bridge must be in
    /// ovn-bridge-mappings].
    #[arg(long, global = true, value_name = "PORT")]
    pub(crate) uplink: Option<String>,
    /// Patch port towards br-int, by its full OVS name (e.g. patch-br-ex_node-a-to-br-int)
    /// [default: the localnet patch port ovn-controller made on the bridge, from the OVS
    /// database].
    #[arg(long, global = true, value_name = "PORT")]
    pub(crate) patch: Option<String>,
    /// shared: steer VIP traffic into OVN and back; local: only the ARP/ND bypass.
    #[arg(long, global = true, value_enum)]
    pub(crate) gateway_mode: Option<GatewayMode>,
    /// VLAN ID of a tagged uplink (bypass flows match it and pop the tag).
    #[arg(long, global = true, value_name = "VID")]
    pub(crate) vlan: Option<u16>,
    /// OpenFlow table for vipflow's flows [default: 0].
    #[arg(long, global = true)]
    pub(crate) table: Option<u8>,
    /// Priority of vipflow's flows [default: 500].
    #[arg(long, global = true)]
    pub(crate) priority: Option<u16>,
    /// The bridge's MAC for the return path (default: learned from the LOCAL port).
    #[arg(long, global = true, value_parser = parse_mac, value_name = "MAC")]
    pub(crate) bridge_mac: Option<[u8; 6]>,
    /// Underlay profile: MAC of the OVN router port VIP traffic is rewritten to.
    #[arg(long, global = true, value_parser = parse_mac, value_name = "MAC")]
    pub(crate) router_mac: Option<[u8; 6]>,
    /// Announce the VIPs on the uplink: one live node per VIP answers ARP (IPv4) or neighbor
    /// solicitations (IPv6) for it from the switch with the bridge's MAC, and sends gratuitous
    /// ARP or an unsolicited advertisement when it takes it; the other nodes drop the
    /// requests. No address goes on any host interface.
    #[arg(long, global = true)]
    pub(crate) announce: bool,
}
