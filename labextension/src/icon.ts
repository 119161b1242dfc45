import { LabIcon } from '@jupyterlab/ui-components';

import qonductorSvgstr from '../style/icons/qonductor.svg';

/** Sidebar tab icon: a tab without one renders blank. */
export const qonductorIcon = new LabIcon({
  name: 'qonductor-jupyter:qonductor',
  svgstr: qonductorSvgstr
});
