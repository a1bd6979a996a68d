"""Checks of the figures an experiment draws: labelled axes and a title.

A figure in a report is read without the code that drew it, so each axes that shows data says
what its axes measure, and the figure has a title (which names the data set).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["figure_titles", "unlabelled_axes"]


def _has_data(ax: Axes) -> bool:
    return bool(ax.lines or ax.collections or ax.images or ax.patches or ax.containers)


def _name(index: int, ax: Axes) -> str:
    title = ax.get_title()
    return f"axes {index}" + (f" ({title!r})" if title else "")


def unlabelled_axes(figure: Figure) -> list[str]:
    """What is missing from the axes of ``figure`` that show data: an x or a y label.

    A twin axes (``twinx``, ``twiny``) shares the label of the axis it shares: its x label
    may stand on its sibling.

    Returns
    -------
    list of str
        One line per missing label, e.g. ``"axes 0 ('spectrum'): no x label"``; empty when
        every axes with data is labelled.

    Examples
    --------
    >>> from matplotlib.figure import Figure
    >>> fig = Figure()
    >>> ax = fig.add_subplot()
    >>> _ = ax.plot([0, 1], [1, 2]); _ = ax.set_xlabel("n")
    >>> unlabelled_axes(fig)
    ['axes 0: no y label']
    """
    problems = []
    for i, ax in enumerate(figure.axes):
        if not _has_data(ax):
            continue
        if not any(a.get_xlabel() for a in ax.get_shared_x_axes().get_siblings(ax)):
            problems.append(f"{_name(i, ax)}: no x label")
        if not any(a.get_ylabel() for a in ax.get_shared_y_axes().get_siblings(ax)):
            problems.append(f"{_name(i, ax)}: no y label")
    return problems


def figure_titles(figure: Figure) -> list[str]:
    """The non-empty titles of ``figure``: its suptitle, then each axes' title."""
    suptitle = figure.get_suptitle()
    titles = [suptitle] if suptitle else []
    return titles + [ax.get_title() for ax in figure.axes if ax.get_title()]
