import { refreshIcon } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import {
  CANCELLABLE_STATES,
  FINAL_STATES,
  IDevice,
  IQpuJob,
  IStep,
  IWorkflowDetail,
  IWorkflowSummary
} from './api';
import { h } from './dom';
import {
  DASH,
  formatAge,
  formatJct,
  formatTime,
  formatWait,
  shortId
} from './format';
import { qonductorIcon } from './icon';
import { QonductorModel } from './model';

export const SIDEBAR_ID = 'qonductor-sidebar';

/** Safety-net refresh period while the panel is visible (the long-poll
 * normally refreshes sooner). */
const VISIBLE_REFRESH_MS = 3000;

/** Cached step details of an expanded workflow row, or why they failed. */
type Detail = { detail: IWorkflowDetail } | { failure: string };

/**
 * Left-sidebar panel: the QPU fleet and the user's workflows.
 *
 * Rows are rebuilt whenever the shown data changes; click handling is
 * delegated to the table bodies so it survives the rebuilds.
 */
export class QonductorSidebar extends Widget {
  constructor(model: QonductorModel) {
    super();
    this._model = model;
    this.id = SIDEBAR_ID;
    this.addClass('jp-Qonductor');
    this.title.icon = qonductorIcon;
    this.title.caption = 'Qonductor';

    const refresh = h('button', {
      class: 'jp-Qonductor-refresh jp-Button jp-mod-minimal',
      title: 'Refresh',
      'aria-label': 'Refresh'
    });
    refresh.appendChild(refreshIcon.element({ tag: 'span' }));
    refresh.addEventListener('click', () => void this._model.refresh());

    this._errorNode = h('div', { class: 'jp-Qonductor-error', role: 'alert' });
    this._errorNode.hidden = true;

    this._fleetBody = h('tbody', { class: 'jp-Qonductor-fleet-body' });
    this._workflowBody = h('tbody', { class: 'jp-Qonductor-workflow-body' });
    this._workflowBody.addEventListener('click', this._onWorkflowClick);
    this._updatedNode = h('div', { class: 'jp-Qonductor-updated' });

    this.node.append(
      h(
        'div',
        { class: 'jp-Qonductor-header' },
        h('h2', { class: 'jp-Qonductor-title' }, 'Qonductor'),
        refresh
      ),
      this._errorNode,
      h(
        'section',
        { class: 'jp-Qonductor-section jp-Qonductor-fleet' },
        h('h3', {}, 'Fleet'),
        table(
          ['QPU', 'Family', 'Qubits', 'Queue', 'Est. wait', 'Calib.'],
          this._fleetBody
        )
      ),
      h(
        'section',
        { class: 'jp-Qonductor-section jp-Qonductor-workflows' },
        h('h3', {}, 'Workflows'),
        table(['ID', 'Name', 'State', 'QPU(s)', 'JCT', ''], this._workflowBody)
      ),
      this._updatedNode
    );

    model.changed.connect(this._onModelChanged, this);
    this._render();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._stopTimer();
    this._model.changed.disconnect(this._onModelChanged, this);
    super.dispose();
  }

  protected onAfterAttach(msg: Message): void {
    super.onAfterAttach(msg);
    this._timer = window.setInterval(() => {
      if (this.isVisible) {
        void this._model.refresh();
      }
    }, VISIBLE_REFRESH_MS);
  }

  protected onBeforeDetach(msg: Message): void {
    this._stopTimer();
    super.onBeforeDetach(msg);
  }

  protected onAfterShow(msg: Message): void {
    super.onAfterShow(msg);
    // Data may be up to a long-poll old when the tab is reopened.
    void this._model.refresh();
  }

  private _stopTimer(): void {
    if (this._timer !== null) {
      window.clearInterval(this._timer);
      this._timer = null;
    }
  }

  private _onModelChanged(): void {
    this._render();
    // Only model changes (not detail replies) trigger detail fetches, so a
    // running workflow's details are polled at the model's pace, not in a loop.
    this._refreshExpandedDetails();
  }

  private _render(): void {
    const model = this._model;
    this._updatedNode.textContent = model.updatedAt
      ? `Updated ${formatTime(model.updatedAt / 1000)}`
      : '';
    // Skip identical rebuilds so a click is never lost to a row being
    // replaced between mousedown and mouseup.
    const key = JSON.stringify([
      model.error,
      model.devices,
      model.workflows,
      [...this._expanded],
      [...this._details]
    ]);
    if (key === this._lastKey) {
      return;
    }
    this._lastKey = key;

    this._errorNode.textContent = model.error ?? '';
    this._errorNode.hidden = !model.error;

    this._fleetBody.replaceChildren(
      ...(model.devices.length
        ? model.devices.map(fleetRow)
        : [emptyRow(6, 'No QPUs')])
    );

    const rows: HTMLTableRowElement[] = [];
    for (const wf of model.workflows) {
      rows.push(workflowRow(wf, this._expanded.has(wf.id)));
      if (this._expanded.has(wf.id)) {
        rows.push(detailRow(wf.id, this._details.get(wf.id)));
      }
    }
    this._workflowBody.replaceChildren(
      ...(rows.length ? rows : [emptyRow(6, 'No workflows yet')])
    );
  }

  private _onWorkflowClick = (event: MouseEvent): void => {
    const target = event.target as HTMLElement;
    const row = target.closest<HTMLElement>('.jp-Qonductor-workflow');
    const id = row?.dataset.workflowId;
    if (!id) {
      return;
    }
    const cancel = target.closest<HTMLButtonElement>('.jp-Qonductor-cancel');
    if (cancel) {
      event.stopPropagation();
      cancel.disabled = true;
      void this._model.cancel(id);
      return;
    }
    if (this._expanded.delete(id)) {
      this._details.delete(id);
    } else {
      this._expanded.add(id);
    }
    this._render();
    this._refreshExpandedDetails();
  };

  /** Keep step details of expanded rows current (and fetch new ones). */
  private _refreshExpandedDetails(): void {
    for (const wf of this._model.workflows) {
      if (!this._expanded.has(wf.id) || this._fetching.has(wf.id)) {
        continue;
      }
      const cached = this._details.get(wf.id);
      const stale =
        !cached ||
        !FINAL_STATES.has(wf.state) ||
        ('detail' in cached && cached.detail.state !== wf.state);
      if (!stale) {
        continue;
      }
      this._fetching.add(wf.id);
      this._model
        .fetchWorkflow(wf.id)
        .then(
          (detail): Detail => ({ detail }),
          (error): Detail => ({
            failure: error instanceof Error ? error.message : String(error)
          })
        )
        .then(detail => {
          this._fetching.delete(wf.id);
          if (this.isDisposed || !this._expanded.has(wf.id)) {
            return;
          }
          this._details.set(wf.id, detail);
          this._render();
        });
    }
  }

  private _model: QonductorModel;
  private _errorNode: HTMLDivElement;
  private _fleetBody: HTMLTableSectionElement;
  private _workflowBody: HTMLTableSectionElement;
  private _updatedNode: HTMLDivElement;
  private _timer: number | null = null;
  private _lastKey = '';
  private _expanded = new Set<string>();
  private _details = new Map<string, Detail>();
  private _fetching = new Set<string>();
}

function table(headers: string[], body: HTMLTableSectionElement): HTMLElement {
  return h(
    'table',
    { class: 'jp-Qonductor-table' },
    h('thead', {}, h('tr', {}, ...headers.map(text => h('th', {}, text)))),
    body
  );
}

function emptyRow(span: number, text: string): HTMLTableRowElement {
  return h(
    'tr',
    { class: 'jp-Qonductor-empty' },
    h('td', { colspan: String(span) }, text)
  );
}

function fleetRow(device: IDevice): HTMLTableRowElement {
  const name = h('td', { class: 'jp-Qonductor-name' }, device.name);
  if (!device.online) {
    name.append(' ', h('span', { class: 'jp-Qonductor-offline' }, 'offline'));
  }
  const row = h(
    'tr',
    {
      class: 'jp-Qonductor-qpu' + (device.online ? '' : ' jp-mod-offline'),
      'data-qpu': device.name,
      'data-online': String(device.online),
      title: device.running ? `Running ${device.running}` : ''
    },
    name,
    h('td', {}, device.family),
    h('td', { class: 'jp-Qonductor-num' }, String(device.num_qubits)),
    h('td', { class: 'jp-Qonductor-num' }, String(device.queue_length)),
    h('td', { class: 'jp-Qonductor-num' }, formatWait(device.expected_wait_s)),
    h('td', { class: 'jp-Qonductor-num' }, formatAge(device.calibration_age_s))
  );
  return row;
}

function workflowRow(
  wf: IWorkflowSummary,
  expanded: boolean
): HTMLTableRowElement {
  const actions = h('td', { class: 'jp-Qonductor-actions' });
  if (CANCELLABLE_STATES.has(wf.state)) {
    actions.append(
      h(
        'button',
        { class: 'jp-Qonductor-cancel jp-Button', title: `Cancel ${wf.id}` },
        'Cancel'
      )
    );
  }
  return h(
    'tr',
    {
      class: 'jp-Qonductor-workflow' + (expanded ? ' jp-mod-expanded' : ''),
      'data-workflow-id': wf.id,
      'data-state': wf.state,
      title: wf.error ? `${wf.id}: ${wf.error}` : wf.id,
      'aria-expanded': String(expanded)
    },
    h('td', { class: 'jp-Qonductor-id' }, shortId(wf.id)),
    h('td', {}, wf.name ?? DASH),
    h(
      'td',
      {},
      h(
        'span',
        { class: `jp-Qonductor-state jp-Qonductor-state-${wf.state}` },
        wf.state
      )
    ),
    h('td', {}, wf.qpus && wf.qpus.length ? wf.qpus.join(', ') : DASH),
    h('td', { class: 'jp-Qonductor-num' }, formatJct(wf.jct_s)),
    actions
  );
}

function detailRow(
  id: string,
  detail: Detail | undefined
): HTMLTableRowElement {
  const cell = h('td', { colspan: '6' });
  if (!detail) {
    cell.append('Loading…');
  } else if ('failure' in detail) {
    cell.append(errorLine(detail.failure));
  } else {
    const wf = detail.detail;
    if (wf.error) {
      cell.append(errorLine(wf.error));
    }
    // Lenient: the step schema is owned by the Python side and may grow.
    const steps = Array.isArray(wf.steps) ? wf.steps : [];
    cell.append(
      steps.length
        ? h('ol', { class: 'jp-Qonductor-steps' }, ...steps.map(stepItem))
        : 'No steps'
    );
  }
  return h(
    'tr',
    { class: 'jp-Qonductor-detail', 'data-detail-for': id },
    cell
  );
}

/** Distinct from the header's `.jp-Qonductor-error` so tests find one. */
function errorLine(text: string): HTMLElement {
  return h('div', { class: 'jp-Qonductor-detail-error' }, text);
}

function stepItem(step: IStep): HTMLLIElement {
  const state = step.state ?? 'unknown';
  return h(
    'li',
    { class: 'jp-Qonductor-step', 'data-step-id': String(step.id) },
    `#${step.id} ${step.kind ?? 'step'} `,
    h(
      'span',
      { class: `jp-Qonductor-state jp-Qonductor-state-${state}` },
      state
    ),
    ...(step.qpu_jobs ?? []).map(job =>
      h('div', { class: 'jp-Qonductor-job' }, describeJob(job))
    )
  );
}

function describeJob(job: IQpuJob): string {
  let text = `${job.id} on ${job.qpu ?? DASH}: ${job.state ?? '?'}`;
  const extra: string[] = [];
  if (typeof job.queue_position === 'number') {
    extra.push(`queue #${job.queue_position}`);
  }
  if (typeof job.est_start_s === 'number') {
    extra.push(`starts in ~${formatWait(job.est_start_s)}`);
  }
  if (extra.length) {
    text += ` (${extra.join(', ')})`;
  }
  return text;
}
