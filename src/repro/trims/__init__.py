"""TrIMS (model sharing for inference): models, model store server, clients, memory monitor."""
