"""The LangGraph Platform API, so that ``langgraph_sdk`` clients drive stageline unchanged.

An assistant is a template, a thread is a run, a LangGraph run is one advance of it (the start,
each resume); the store is LangGraph's own, on the project's database. ``ROUTERS`` is what
the app includes.
"""

from __future__ import annotations

from fastapi import APIRouter

from stageline.server.langgraph import (
    assistants,
    crons,
    runs,
    store,
    threads,
    threads_socket,
    threads_stream,
)

__all__ = ["ROUTERS"]

ROUTERS: list[APIRouter] = [
    assistants.router,
    threads_stream.router,
    threads_socket.router,
    threads.router,
    crons.router,
    runs.router,
    store.router,
]
