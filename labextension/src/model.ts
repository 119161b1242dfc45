import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import { requestAPI } from './api';
import {
  CancelView,
  DeviceStatus,
  EventsView,
  FleetView,
  WorkflowDetail,
  WorkflowSummary,
  WorkflowsView
} from './schema';

/** Seconds the server may hold an events long-poll open. */
const LONG_POLL_TIMEOUT_S = 25;
/** Pause after a failed long-poll so a down server is not hammered. */
const LONG_POLL_BACKOFF_MS = 2000;
/** An unchanged-seq reply faster than this means the server did not wait. */
const MIN_IDLE_POLL_MS = 500;
const WORKFLOW_LIMIT = 50;

/** A QPU as the sidebar shows it: with its calibration's age. */
export interface IFleetDevice extends DeviceStatus {
  /** Seconds from the calibration to the server's clock; null when unknown. */
  calibration_age_s: number | null;
}

/**
 * Seconds from a device's calibration to `now` (the server's clock, so the
 * browser's clock does not matter), at least 0; null when not known.
 */
export function calibrationAge(
  device: DeviceStatus,
  now: number
): number | null {
  return device.calibrated_at === null
    ? null
    : Math.max(0, now - device.calibrated_at);
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function sleep(ms: number): Promise<void> {
  return new Promise(resolve => setTimeout(resolve, ms));
}

/**
 * The one client-side copy of orchestrator state, shared by the sidebar and
 * the status bar so that a single long-poll drives both.
 */
export class QonductorModel implements IDisposable {
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get isDisposed(): boolean {
    return this._isDisposed;
  }

  get devices(): readonly IFleetDevice[] {
    return this._devices;
  }

  /** Newest first. */
  get workflows(): readonly WorkflowSummary[] {
    return this._workflows;
  }

  get runningJobs(): number {
    return this._runningJobs;
  }

  get queuedJobs(): number {
    return this._queuedJobs;
  }

  /**
   * Whether an orchestrator runs (null until the first poll answers). Only
   * fleet and workflow requests start one, so the status bar alone never does.
   */
  get orchestratorRunning(): boolean | null {
    return this._orchestrator;
  }

  /** Latest error to show, or null when the last refresh and poll worked. */
  get error(): string | null {
    return this._refreshError ?? this._pollError;
  }

  /** Epoch ms of the last successful refresh, or null before the first. */
  get updatedAt(): number | null {
    return this._updatedAt;
  }

  /**
   * Start the event long-poll. It refreshes only while an orchestrator runs;
   * the visible sidebar refreshes (and so starts one) by itself.
   */
  start(): void {
    if (this._started || this._isDisposed) {
      return;
    }
    this._started = true;
    void this._pollLoop();
  }

  /**
   * Fetch fleet and workflows. Calls made while a refresh is in flight are
   * coalesced into one follow-up refresh instead of running concurrently.
   */
  refresh(): Promise<void> {
    if (this._inflight) {
      this._again = true;
      return this._inflight;
    }
    this._inflight = (async () => {
      try {
        do {
          this._again = false;
          await this._refreshOnce();
        } while (this._again && !this._isDisposed);
      } finally {
        this._inflight = null;
      }
    })();
    return this._inflight;
  }

  fetchWorkflow(id: string): Promise<WorkflowDetail> {
    return requestAPI<WorkflowDetail>(`workflows/${encodeURIComponent(id)}`);
  }

  async cancel(id: string): Promise<void> {
    try {
      await requestAPI<CancelView>(
        `workflows/${encodeURIComponent(id)}/cancel`,
        { method: 'POST' }
      );
    } catch (error) {
      this._refreshError = errorMessage(error);
      this._changed.emit();
    }
    await this.refresh();
  }

  dispose(): void {
    if (this._isDisposed) {
      return;
    }
    this._isDisposed = true;
    this._abort.abort();
    Signal.clearData(this);
  }

  private async _refreshOnce(): Promise<void> {
    const [fleet, workflows] = await Promise.allSettled([
      requestAPI<FleetView>('fleet'),
      requestAPI<WorkflowsView>(`workflows?limit=${WORKFLOW_LIMIT}`)
    ]);
    if (this._isDisposed) {
      return;
    }
    let error: string | null = null;
    if (fleet.status === 'fulfilled') {
      const { devices, updated_at } = fleet.value;
      this._devices = devices.map(device => ({
        ...device,
        calibration_age_s: calibrationAge(device, updated_at)
      }));
    } else {
      error = errorMessage(fleet.reason);
    }
    if (workflows.status === 'fulfilled') {
      const reply = workflows.value;
      // Sort here rather than trust server order: the UI promises newest first.
      this._workflows = [...reply.workflows].sort(
        (a, b) => b.created_at - a.created_at
      );
      this._runningJobs = reply.running_jobs;
      this._queuedJobs = reply.queued_jobs;
    } else {
      error = error ?? errorMessage(workflows.reason);
    }
    if (error === null) {
      this._updatedAt = Date.now();
    }
    this._refreshError = error;
    this._changed.emit();
  }

  /** Refresh whenever the server's event sequence number moves. */
  private async _pollLoop(): Promise<void> {
    let seq = -1;
    while (!this._isDisposed) {
      const started = Date.now();
      try {
        const reply = await requestAPI<EventsView>(
          `events?after=${seq}&timeout=${LONG_POLL_TIMEOUT_S}`,
          { signal: this._abort.signal }
        );
        const running = reply.orchestrator;
        if (this._pollError !== null || running !== this._orchestrator) {
          this._pollError = null;
          this._orchestrator = running;
          this._changed.emit();
        }
        // Any change, not only an increase: a lower seq means the server
        // restarted and its counter began again.
        if (reply.seq !== seq) {
          seq = reply.seq;
          if (running) {
            void this.refresh();
          }
        } else if (Date.now() - started < MIN_IDLE_POLL_MS) {
          // The server answered at once without news (it ignored the
          // timeout): pace ourselves instead of spinning.
          await sleep(LONG_POLL_BACKOFF_MS);
        }
      } catch (error) {
        if (this._isDisposed) {
          return;
        }
        this._pollError = errorMessage(error);
        this._changed.emit();
        await sleep(LONG_POLL_BACKOFF_MS);
      }
    }
  }

  private _changed = new Signal<this, void>(this);
  private _isDisposed = false;
  private _started = false;
  private _abort = new AbortController();
  private _inflight: Promise<void> | null = null;
  private _again = false;
  private _devices: IFleetDevice[] = [];
  private _workflows: WorkflowSummary[] = [];
  private _runningJobs = 0;
  private _queuedJobs = 0;
  private _refreshError: string | null = null;
  private _pollError: string | null = null;
  private _orchestrator: boolean | null = null;
  private _updatedAt: number | null = null;
}
