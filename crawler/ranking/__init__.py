"""Ranking (pure: no I/O): the search's model, bounds, search columns, order and commands.

:mod:`~crawler.ranking.model` (Budget, RunSpec, Filters, Candidate, Ranked, SearchOutcome),
:mod:`~crawler.ranking.bounds` (the memory and sort bounds beside their SQL twins),
:mod:`~crawler.ranking.columns` (the catalog's search columns computed from an analysis),
:mod:`~crawler.ranking.rank` (the ranking loop), :mod:`~crawler.ranking.evaluate` (one
candidate's fit, margin, context, quality and speed), :mod:`~crawler.ranking.order` (the sort
keys) and :mod:`~crawler.ranking.commands` (the llama-server, Ollama and LM Studio command
lines). The tensor-group statistics every layer shares are :mod:`crawler.group_stats`, below this
package and the quality model. The catalog imports the types and SQL builders; nothing here
imports the catalog.
"""
