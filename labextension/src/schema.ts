// Generated from kernel_server/core/status.py (json_schema()) by tools/gen_ts_types.py.
// Do not edit: change the Python schema and regenerate with `python tools/gen_ts_types.py`.

/**
 * ``GET fleet``: the QPUs, and the server's clock (calibration ages count from it).
 */
export interface FleetView {
  devices: DeviceStatus[];
  updated_at: number;
}

/**
 * A QPU of the fleet now: its description, whether it takes jobs and its queue.
 */
export interface DeviceStatus {
  name: string;
  num_qubits: number;
  family: string;
  calibration_id: string;
  basis_gates: string[];
  calibrated_at: number | null;
  fidelity_score: number | null;
  kind: 'ibm' | 'simulated';
  local_testing: boolean;
  billed: boolean;
  online: boolean;
  queue_length: number;
  expected_wait_s: number;
  jobs_done: number;
  busy_s: number;
  running: string | null;
}

/**
 * ``GET workflows``: the newest workflows and how many of their QPU jobs run and wait.
 */
export interface WorkflowsView {
  workflows: WorkflowSummary[];
  running_jobs: number;
  queued_jobs: number;
}

/** One row of a workflow listing. */
export interface WorkflowSummary {
  id: string;
  image_id: string;
  name: string | null;
  state: WorkflowState;
  created_at: number;
  finished_at: number | null;
  error: string | null;
  qpus: string[];
  jobs_running: number;
  jobs_queued: number;
  jct_s: number | null;
}

export type WorkflowState =
  | 'cancelled'
  | 'done'
  | 'failed'
  | 'running'
  | 'submitted';

/**
 * ``GET workflows/ID``: a workflow's state and steps (its values stay in the kernel).
 */
export interface WorkflowDetail {
  workflow_id: string;
  state: WorkflowState;
  error: string | null;
  steps: StepStatus[];
  info: WorkflowInfo;
}

/** A workflow step: its job, where it is in the cell, and its QPU jobs. */
export interface StepStatus {
  id: string;
  kind: 'background' | 'classical' | 'hybrid' | 'qpu' | 'quantum';
  state: JobState;
  step_id: number | null;
  parent: string | null;
  qpu: string | null;
  est_fidelity: number | null;
  est_duration_s: number | null;
  shots: number | null;
  num_circuits: number | null;
  queue_s: number | null;
  run_s: number | null;
  error: string | null;
  method: string | null;
  mitigation: string | null;
  plans: Plan[] | PlanError | null;
  awaiting_choice: boolean;
  worker: string | null;
  queue_position: number | null;
  est_start_s: number | null;
  lineno: number;
  end_lineno: number;
  first_line: string;
  qpu_jobs: JobStatus[];
}

export type JobState =
  | 'cancelled'
  | 'done'
  | 'estimating'
  | 'failed'
  | 'pending'
  | 'post-processing'
  | 'queued'
  | 'running';

/**
 * One Pareto-ranked way to run a quantum step: a QPU template, a mitigation stack and an
 * accelerator, with what the estimator expects of it.
 */
export interface Plan {
  rank: number;
  backend: string;
  mitigation: string;
  accelerator: string;
  shots: number;
  fidelity: number;
  numerical_fidelity: number;
  quantum_seconds: number;
  classical_seconds: number;
  cost: number;
  num_circuits: number;
  total_shots: number;
  quantum_seconds_low: number | null;
  quantum_seconds_high: number | null;
  members: string[];
  chosen: boolean;
}

/**
 * Why a step has no resource plans (the job runs unmitigated on the scheduler's choice).
 */
export interface PlanError {
  error: string;
}

/** A job as a status reply shows it: a workflow step or a QPU job. */
export interface JobStatus {
  id: string;
  kind: 'background' | 'classical' | 'hybrid' | 'qpu' | 'quantum';
  state: JobState;
  step_id: number | null;
  parent: string | null;
  qpu: string | null;
  est_fidelity: number | null;
  est_duration_s: number | null;
  shots: number | null;
  num_circuits: number | null;
  queue_s: number | null;
  run_s: number | null;
  error: string | null;
  method: string | null;
  mitigation: string | null;
  plans: Plan[] | PlanError | null;
  awaiting_choice: boolean;
  worker: string | null;
  queue_position: number | null;
  est_start_s: number | null;
}

/** What a workflow is, beside its state: its image, name, times and options. */
export interface WorkflowInfo {
  image_id: string;
  name: string | null;
  created_at: number | null;
  finished_at: number | null;
  options: RunOptions;
}

/**
 * A workflow run's options: its image's deployment config with the invocation's on top,
 * checked by :func:`validate_config` and defaulted here, the only place the defaults live.
 */
export interface RunOptions {
  qpu: QpuRequirements;
  classical: ClassicalRequest | null;
  shots: number;
  priority: 'balanced' | 'fidelity' | 'jct';
  seed: number | null;
  timeout_s: number | null;
  step_timeout_s: number | null;
  placement: string | null;
  plan: string | number;
}

/**
 * Which QPUs a workflow's jobs may use (the ``qpu:`` section; encoded as given: only the
 * requirements set).
 */
export interface QpuRequirements {
  min_qubits?: number;
  max_qubits?: number | null;
  families?: string[];
  backends?: string[];
}

/** What one classical job needs from the node it runs on. */
export interface ClassicalRequest {
  cores: number;
  memory_gb: number;
  accelerator: string | null;
  accelerator_count: number;
  node_selector: Record<string, string>;
}

/**
 * ``POST workflows/ID/cancel``: the state after the cancel and the jobs it stopped.
 */
export interface CancelView {
  workflow_id: string;
  state: WorkflowState;
  cancelled: string[];
}

/**
 * ``GET events``: the number of the newest event, and whether an orchestrator runs.
 */
export interface EventsView {
  seq: number;
  orchestrator: boolean;
}
