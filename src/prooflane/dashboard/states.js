// The job states the page treats as finished: prooflane.states.TERMINAL_JOB_STATES (a test compares the two).
// No dependencies.

/** A job in one of these states is over: done, failed or cancelled. */
export const TERMINAL_JOB_STATES = ["done", "failed", "cancelled"];

/** The same, as a set, for lookups. */
export const TERMINAL_JOB = new Set(TERMINAL_JOB_STATES);
