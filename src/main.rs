//! The `vipflow` command: a thin shell over the library (config, logging, dispatch).

mod cli;

use clap::Parser;
use cli::args::{Cli, ClusterFlags, Command};
use cli::merge::build_config;
use cli::status::fetch_status;
use std::process::ExitCode;
use std::time::Duration;
use vipflow::agent;
use vipflow::config::{Config, LogFormat, format_mac};
use vipflow::source::file;

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

fn load_objects(cfg: &Config) -> Result<vipflow::model::Loaded, String> {
    let path = agent::objects_path(cfg).map_err(|e| e.to_string())?;
    file::load(&path, cfg.objects_max_bytes).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    vipflow::memory::tune();
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
    if matches!(cli.command, Command::Agent { once: false, .. }) {
        agent::fence::enable();
    }
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

async fn dispatch(
    cmd: Command,
    mut cfg: Config,
    cluster: ClusterFlags,
) -> Result<ExitCode, String> {
    // Every dial of the Northbound database in this process, the agent's writer included,
    // goes by one backoff.
    let nb_backoff = vipflow::reconcile::northbound::peer_backoff();
    // `--node-rows auto` is decided by the Northbound database in front of this agent (`plan`
    // connects to nothing: it prints per-node rows and says so).
    if let Some(remotes) = &cfg.nb_remote
        && matches!(cmd, Command::Agent { .. } | Command::Verify)
    {
        let mode = cfg.northbound.node_rows;
        cfg.northbound.node_rows =
            vipflow::reconcile::northbound::resolve_node_rows(remotes, mode, &nb_backoff).await;
    }
    match cmd {
        Command::Plan => {
            let loaded = load_objects(&cfg)?;
            let one = agent::plan_once(&cfg, &loaded.objects, true);
            let problems = agent::report_problems(&cfg, &loaded, &one.planner.services().report());
            for p in &problems {
                eprintln!("{}: {p}", p.kind.outcome());
            }
            let router_mac = agent::router_mac(&cfg, &loaded.objects);
            let announcing = vipflow::announce::Announcing::of(&cfg);
            for (i, b) in cfg.bridges.iter().enumerate() {
                let (answers, flows): (Vec<_>, Vec<_>) =
                    one.flows(i).into_iter().partition(|f| f.key.is_answer());
                println!("# bridge {} ({} flows)", b.name, flows.len());
                for f in &flows {
                    println!("{}", f.display(b));
                }
                if announcing.bridge(&b.name) && one.ownership_unknown {
                    println!(
                        "# answers: the membership places each VIP on one live node; `vipflow status` on a running agent shows which it answers for"
                    );
                } else if announcing.bridge(&b.name) {
                    println!(
                        "# answers node {} puts on {} ({} flows: the VIPs placed on it over the Ready Nodes)",
                        cfg.node_name,
                        b.name,
                        answers.len()
                    );
                    for f in &answers {
                        println!("{}", f.display(b));
                    }
                }
                // Known only at the switch: the bridge's own MAC, which decides the rewrite.
                if let Some(mac) = router_mac.filter(|_| vipflow::plan::flows::steers_to_router(b))
                {
                    let mac = format_mac(&mac);
                    println!(
                        "# where {}'s own MAC differs from the OVN gateway router's {mac} (Node {}, annotation {}), the agent puts set_field:{mac}->eth_dst before every output to the patch port into OVN above",
                        b.name,
                        cfg.node_name,
                        vipflow::keys::L3_GATEWAY_CONFIG_ANNOTATION
                    );
                }
            }
            let withheld = one.planner.l2_withheld(&cfg.node_name);
            if !withheld.is_empty() {
                println!(
                    "# answers node {} puts on no bridge, as MetalLB's L2Advertisements say ({})",
                    cfg.node_name,
                    withheld.len()
                );
                for (vip, reason) in &withheld {
                    println!("#   {vip}: {reason}");
                }
            }
            let rows: Vec<&vipflow::plan::northbound::LbRow> = one
                .plans
                .northbound
                .iter()
                .flat_map(|n| n.rows.values())
                .flat_map(|rows| rows.iter())
                .collect();
            println!("# northbound Load_Balancer rows ({})", rows.len());
            if cfg.northbound.node_rows == vipflow::plan::node_template::NodeRows::Auto {
                println!(
                    "# node rows: auto, printed per-node; the agent writes templates where the Northbound database has Chassis_Template_Var (--node-rows template shows them)"
                );
            }
            for r in &rows {
                println!("{r}");
            }
            let metallb = vipflow::metallb::became(&loaded.objects);
            if !metallb.is_empty() {
                println!("# MetalLB's objects, read as vipflow's ({})", metallb.len());
                for l in &metallb {
                    println!("#   {l}");
                }
            }
            if let Some(bgp) = one.bgp(&cfg, &loaded.objects) {
                print_bgp_plan(&cfg, &bgp);
            }
            let allocations =
                agent::plan_allocations(&cfg, &loaded.objects).map_err(|e| e.to_string())?;
            if !allocations.is_empty() {
                println!(
                    "# addresses the elected agent would allocate from the VipPools (--allocate-ips)"
                );
                for a in &allocations {
                    println!("#   {a}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Fence {
            target,
            cookie_prefix,
        } => {
            let targets = agent::fence::FenceTargets {
                targets: target,
                cookie_prefix,
            };
            agent::fence::run(targets, openflow::Config::default()).await;
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
                if d.ownership_unknown {
                    println!(
                        "{}: answer flows not compared: the membership decides which node answers for each VIP (`vipflow status` on the running agent)",
                        d.bridge
                    );
                }
                if d.is_empty() {
                    println!("{}: in sync", d.bridge);
                    continue;
                }
                drift = true;
                println!(
                    "{}: drift ({} missing, {} unexpected, {} changed)",
                    d.bridge,
                    d.missing.len(),
                    d.extra.len(),
                    d.changed.len()
                );
                for f in &d.missing {
                    println!("+ {f}");
                }
                for f in &d.extra {
                    println!("- {f}");
                }
                for (have, want) in &d.changed {
                    println!("~ {have}  # planned: {want}");
                }
            }
            if agent::frr_is_frr_k8s(&cfg) {
                println!(
                    "frr: not compared: frr-k8s mode (--frr-k8s on): frr-k8s's FRR advertises what the FRRConfiguration objects say, which the agents write in cluster mode (`vipflow plan --frr-k8s on` prints vipflow's)"
                );
            }
            if let Some(lines) = agent::verify_frr(&cfg, &loaded.objects)
                .await
                .map_err(|e| e.to_string())?
            {
                if lines.is_empty() {
                    println!("frr: in sync");
                } else {
                    drift = true;
                    println!("frr: drift ({} differences)", lines.len());
                    for l in &lines {
                        println!("{l}");
                    }
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
            let one = agent::plan_once(&cfg, &loaded.objects, false);
            let problems = agent::report_problems(&cfg, &loaded, &one.planner.services().report());
            for p in problems.iter().skip(loaded.problems.len()) {
                tracing::warn!(problem = %p, "skipped");
            }
            let reports = agent::sync_plan(&cfg, &loaded.objects, &one)
                .await
                .map_err(|e| e.to_string())?;
            for r in reports {
                for s in &r.skipped {
                    tracing::warn!(bridge = %r.bridge, "not programmed: {s}");
                }
                tracing::info!(bridge = %r.bridge, changes = r.changes, flows = r.flows, "synced once");
            }
            if agent::frr_is_frr_k8s(&cfg) {
                tracing::info!(
                    "frr-k8s mode (--frr-k8s on): FRR is frr-k8s's and left as it is; the agents write its FRRConfiguration objects in cluster mode"
                );
            }
            if let Some(f) = agent::sync_frr_once(&cfg, &loaded.objects, &one)
                .await
                .map_err(|e| e.to_string())?
            {
                tracing::info!(
                    config_batches = f.config_batches,
                    batches = f.batches,
                    prefixes = f.originated.len(),
                    "FRR synced once"
                );
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
                if cfg.allocate_ips {
                    return Err(
                        "--allocate-ips needs cluster mode (no --objects): the addresses are written into the Services' status"
                            .into(),
                    );
                }
                let poll = Duration::from_millis(poll_interval_ms.max(10));
                agent::run(cfg, poll, Some(nb_backoff))
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
                    nb_backoff: Some(nb_backoff),
                };
                agent::run_cluster(cfg, opts)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `vipflow plan`'s BGP part: the node's FRR configuration, the prefixes it advertises, and
/// why each VIP of a BGP pool is or is not advertised.
/// frr-k8s mode: the objects the elected agent and this node's agent write, as YAML after
/// `#   `, then why each VIP is or is not advertised from this node.
fn print_frr_k8s_plan(cfg: &Config, bgp: &agent::OneShotBgp, k: &agent::OneShotFrrK8s) {
    for p in &bgp.problems {
        eprintln!("skipped: {p}");
    }
    let print = |o: &vipflow::frrk8s::objects::FrrConfiguration| match serde_yaml_ng::to_string(o) {
        Ok(text) => {
            println!("#   ---");
            for l in text.lines() {
                println!("#   {l}");
            }
        }
        Err(e) => eprintln!("cannot print an FRRConfiguration: {e}"),
    };
    println!(
        "# bgp through frr-k8s: the shared FRRConfigurations the elected agent writes in {} ({})",
        cfg.bgp.frr_k8s_namespace,
        k.pools.len()
    );
    for o in k.pools.values() {
        print(o);
    }
    match &k.own {
        Some(o) => {
            println!(
                "# bgp through frr-k8s: node {}'s own FRRConfiguration (its externalTrafficPolicy Local VIPs, each once its bridges carry it)",
                cfg.node_name
            );
            print(o);
        }
        None => println!(
            "# bgp through frr-k8s: node {} writes no FRRConfiguration of its own (no Local VIP here)",
            cfg.node_name
        ),
    }
    for (vip, reason) in bgp.node.vips.iter() {
        println!("#   {vip}: {reason}");
    }
}

fn print_bgp_plan(cfg: &Config, bgp: &agent::OneShotBgp) {
    if let Some(k) = &bgp.frr_k8s {
        print_frr_k8s_plan(cfg, bgp, k);
        return;
    }
    match &bgp.config {
        Some(c) => {
            println!(
                "# bgp: node {}'s FRR configuration (from the BGPPeers and BFDProfiles)",
                cfg.node_name
            );
            for l in c.lines() {
                println!("#   {l}");
            }
        }
        None => println!(
            "# bgp: no BGPPeer selects node {}: it advertises nothing",
            cfg.node_name
        ),
    }
    for p in &bgp.problems {
        eprintln!("skipped: {p}");
    }
    let prefixes = if bgp.config.is_some() {
        bgp.node.prefixes.len()
    } else {
        0
    };
    println!(
        "# bgp: prefixes node {} advertises ({prefixes}), each once its bridges carry it",
        cfg.node_name
    );
    if bgp.config.is_some() {
        for p in bgp.node.prefixes.iter() {
            println!("network {p}");
        }
    }
    for (vip, reason) in bgp.node.vips.iter() {
        println!("#   {vip}: {reason}");
    }
}
