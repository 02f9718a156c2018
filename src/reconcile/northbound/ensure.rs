//! The Northbound writes that need an answer before the session goes on: the writer token, and
//! vipflow's Load_Balancer_Group and chassis template rows created before a diff that needs
//! them. Each is one transaction on the client; the session ([`Session`]) records what was
//! created.

use ovsdb::txn::WaitUntil;
use ovsdb::{Atom, Client, Mutation, Mutator, OpResult, Row, Transaction, Uuid, Value};
use std::collections::BTreeSet;
use vipflow_core::keys::WRITER_KEY;
use vipflow_core::plan::northbound::GroupPlan;
use vipflow_core::reconcile::northbound::{
    CHASSIS_VARS, DB, DesiredRows, GROUP, Holder, NB_GLOBAL, Session, fenced,
};

/// Make `token` the writer token (creating `NB_Global` if missing, as `ovn-nbctl init` does).
/// From the commit on, every transaction fenced with an earlier token fails; so a snapshot
/// taken after this call holds everything an earlier writer will ever have written.
pub async fn take_over(client: &Client, token: &str) -> Result<(), ovsdb::Error> {
    let mut txn = Transaction::new(DB);
    txn.mutate(
        NB_GLOBAL,
        vec![],
        vec![Mutation::new(
            "external_ids",
            Mutator::Delete,
            Value::set([WRITER_KEY]),
        )],
    );
    txn.mutate(
        NB_GLOBAL,
        vec![],
        vec![Mutation::new(
            "external_ids",
            Mutator::Insert,
            Value::map([(WRITER_KEY, token)]),
        )],
    );
    txn.comment("vipflow: Northbound writer");
    let r = client.transact(&txn).await?;
    if matches!(r.first(), Some(OpResult::Count(n)) if *n > 0) {
        return Ok(());
    }
    // No NB_Global row yet: create it, unless someone else just did.
    let mut txn = Transaction::new(DB);
    txn.wait(
        NB_GLOBAL,
        vec![],
        &["_uuid"],
        WaitUntil::Equal,
        vec![],
        Some(0),
    );
    txn.insert(
        NB_GLOBAL,
        Row::from([(
            "external_ids".to_string(),
            Value::map([(WRITER_KEY, token)]),
        )]),
    );
    txn.comment("vipflow: Northbound writer");
    client.transact(&txn).await.map(|_| ())
}

/// Create the plan's group if the session has not seen it. A cache that is behind cannot make
/// a second one: the schema's index on `name` fails such an insert.
pub async fn ensure_groups(
    session: &mut Session,
    client: &Client,
    plan: &DesiredRows,
) -> Result<(), ovsdb::Error> {
    for g in plan.groups.iter() {
        ensure_one(session, client, g).await?;
    }
    Ok(())
}

async fn ensure_one(
    session: &mut Session,
    client: &Client,
    g: &GroupPlan,
) -> Result<(), ovsdb::Error> {
    if session.observed.groups.contains_key(&g.name) {
        return Ok(());
    }
    let mut txn = Transaction::new(DB);
    txn.insert(
        GROUP,
        Row::from([("name".to_string(), Value::Atom(Atom::string(&g.name)))]),
    );
    txn.comment(&format!("vipflow: Load_Balancer_Group {}", g.name));
    let replies = client
        .transact(&fenced(txn, session.token.as_deref()))
        .await?;
    let Some(uuid) = replies.iter().find_map(OpResult::uuid) else {
        // Committed, but the reply names no row: the monitor will show it.
        return Ok(());
    };
    tracing::info!(group = %g.name, "created vipflow's Load_Balancer_Group");
    session.observed.groups.insert(
        g.name.clone(),
        Holder {
            uuid,
            ..Holder::default()
        },
    );
    Ok(())
}

/// Create the rows of the chassis the plan has values for and the session has not seen. A
/// cache that is behind cannot make a second one: the schema's index on `chassis` fails
/// such an insert (and the next attempt sees the row).
pub async fn ensure_chassis(
    session: &mut Session,
    client: &Client,
    missing: BTreeSet<String>,
) -> Result<(), ovsdb::Error> {
    if missing.is_empty() {
        return Ok(());
    }
    let mut txn = Transaction::new(DB);
    for c in &missing {
        txn.insert(
            CHASSIS_VARS,
            Row::from([("chassis".to_string(), Value::Atom(Atom::string(c)))]),
        );
    }
    txn.comment(&format!(
        "vipflow: Chassis_Template_Var for {} chassis",
        missing.len()
    ));
    let replies = client
        .transact(&fenced(txn, session.token.as_deref()))
        .await?;
    let uuids: Vec<Uuid> = replies.iter().filter_map(OpResult::uuid).collect();
    if uuids.len() == missing.len() {
        for (c, uuid) in missing.into_iter().zip(uuids) {
            session.observed.chassis.created(c, uuid);
        }
    }
    Ok(())
}

/// [`ensure_chassis`] the rows of the chassis `plan` names.
pub async fn ensure_planned(
    session: &mut Session,
    client: &Client,
    plan: &DesiredRows,
) -> Result<(), ovsdb::Error> {
    let Some(want) = &plan.template_chassis else {
        return Ok(());
    };
    let missing: BTreeSet<String> = want
        .iter()
        .filter(|c| !session.observed.chassis.contains(c))
        .cloned()
        .collect();
    ensure_chassis(session, client, missing).await
}
