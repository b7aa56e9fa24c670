//! kiln's own limits: the open-files limit every connection counts against. A load that
//! needs more descriptors than kiln may open is refused before it starts, never run into.

use crate::plan::{LoadPlan, Model};

/// Descriptors kept for everything that is not a connection: the run record's files, the
/// sampler's /proc files, perf's pipes, the OTLP receiver's connections.
pub const RESERVED_FILES: u64 = 256;

/// The descriptors kept aside under a limit of `soft`: [`RESERVED_FILES`], or a quarter of a
/// small limit (a limit of 256 once left room for no connection at all: "lower -c to at most
/// 0").
pub fn reserved_files(soft: u64) -> u64 {
    RESERVED_FILES.min(soft / 4)
}

pub use kiln_record::descriptors::{open_files_limit, raise_open_files_limit};

/// Connections the plan may hold open at once.
pub fn connections_needed(plan: &LoadPlan) -> u64 {
    match &plan.model {
        Model::Closed { connections, .. } => *connections as u64,
        Model::Open {
            max_connections, ..
        } => *max_connections as u64,
    }
}

/// Lowers an open model's `--max-connections` to what the open-files limit allows (after
/// raising it); the note to show when it did. What cannot be sent for want of connections is
/// then counted as unsent, as any other shortage of connections.
pub fn fit_max_connections(plan: &mut LoadPlan) -> Option<String> {
    let soft = raise_open_files_limit()?;
    let room = soft.saturating_sub(reserved_files(soft)) as usize;
    match &mut plan.model {
        Model::Open {
            connections,
            max_connections,
            ..
        } if *max_connections > room && room >= *connections => {
            let note = format!(
                "--max-connections lowered from {max_connections} to {room}: kiln may open \
                 {soft} files (raise it with ulimit -n)"
            );
            *max_connections = room;
            Some(note)
        }
        _ => None,
    }
}

/// Raises the soft limit and checks the plan fits in it, with the way out when it does not.
pub fn check_open_files(plan: &LoadPlan) -> Result<(), crate::PlanError> {
    let Some(soft) = raise_open_files_limit() else {
        return Ok(());
    };
    let needed = connections_needed(plan);
    let reserved = reserved_files(soft);
    if needed + reserved > soft {
        let flag = match plan.model {
            Model::Closed { .. } => "-c",
            Model::Open { .. } => "--max-connections",
        };
        return Err(crate::PlanError::TooFewOpenFiles {
            flag,
            needed,
            files: needed + reserved,
            limit: soft,
            most: soft.saturating_sub(reserved),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let (_, hard) = open_files_limit().unwrap();
        assert_eq!(raise_open_files_limit(), Some(hard));
        assert_eq!(open_files_limit().unwrap().0, hard);
    }

    #[test]
    fn a_small_limit_keeps_room_for_connections() {
        assert_eq!(reserved_files(256), 64);
        assert_eq!(reserved_files(1 << 20), RESERVED_FILES);
        assert_eq!(reserved_files(0), 0);
    }
}
