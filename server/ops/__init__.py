"""Operations: Prometheus metrics, logging, process figures, event-loop lag, giving memory
back."""
