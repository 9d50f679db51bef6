"""Confidences inside the clients people build on: the official OpenAI client and LangChain.

==============================  ==================================================
:mod:`.openai_client`           :func:`~.openai_client.wrap`: ``openai.OpenAI`` /
                                ``AsyncOpenAI`` whose chat completions carry
                                ``reply.confide`` (``confide.wrap``)
:mod:`.langchain`               :class:`~.langchain.ConfidenceChatModel`: any
                                LangChain chat model, confidences in
                                ``AIMessage.response_metadata["confide"]``
                                (the ``langchain`` extra)
:mod:`.scoring`                 the ``confide`` object both attach: each choice
                                scored by :func:`confide.score_answers`
==============================  ==================================================

Neither computes a confidence itself: a reply is scored as an answer made elsewhere,
through the import boundary and the engine of ``confide score``, so the same reply gets
the same confidences through a wrapper, :func:`confide.score_answers` or an imported log.
Importing this package imports neither ``openai`` nor ``langchain_core``.
"""
