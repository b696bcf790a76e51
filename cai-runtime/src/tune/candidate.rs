//! A candidate of a tuning: a launch configuration, the template arguments of the
//! instance it launches, and the label that names it across calls.

use crate::dispatch::TemplateArg;
use crate::launch::LaunchConfig;

/// One candidate: a launch configuration and the template arguments of the instance it
/// launches (none: the instance the launch's arguments select). Its label names it across
/// calls (a grid computed from the arguments changes from call to call; the label does not).
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub config: LaunchConfig,
    pub template: Vec<TemplateArg>,
    pub label: String,
}

impl Candidate {
    /// `config`, labelled by its block, dynamic shared memory and grid.
    pub fn new(config: LaunchConfig) -> Candidate {
        let label = format!("grid={:?} block={:?} shared_mem={}", config.grid, config.block, config.shared_mem);
        Candidate { config, template: Vec::new(), label }
    }

    /// The explicit instance with these template arguments.
    pub fn template(mut self, args: Vec<TemplateArg>) -> Candidate {
        let list: Vec<String> = args.iter().map(TemplateArg::to_string).collect();
        self.label.push_str(&format!(" template=<{}>", list.join(", ")));
        self.template = args;
        self
    }

    /// Another label (one that stays the same when the grid follows the arguments).
    pub fn labelled(mut self, label: impl Into<String>) -> Candidate {
        self.label = label.into();
        self
    }
}
