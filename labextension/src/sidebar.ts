import { refreshIcon } from '@jupyterlab/ui-components';
import { Message } from '@lumino/messaging';
import { Widget } from '@lumino/widgets';

import { FINAL_STATES } from './api';
import { h } from './dom';
import { formatTime } from './format';
import { qonductorIcon } from './icon';
import { QonductorModel } from './model';
import {
  Detail,
  detailRow,
  emptyRow,
  fleetRow,
  table,
  workflowRow
} from './rows';

export const SIDEBAR_ID = 'qonductor-sidebar';

/** Safety-net refresh period while the panel is visible (the long-poll
 * normally refreshes sooner). */
const VISIBLE_REFRESH_MS = 3000;


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
