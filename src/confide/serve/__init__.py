"""``confide serve``: an OpenAI-compatible chat server that adds confidences to each reply.

Needs the ``serve`` extra (FastAPI, uvicorn). :func:`confide.serve.app.create_app`
builds the application around a loaded backend; :func:`confide.serve.launch.serve`
loads the model and runs it with uvicorn.
"""
