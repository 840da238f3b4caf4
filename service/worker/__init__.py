"""A worker process (`process`): the scheduler of continuous batching over one engine a
model version, its threads (the encoder's, the step's, the outbox), and the messages it
exchanges with the front."""
