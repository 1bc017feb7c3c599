"""Speech over the bot: pause at once, then judge it a real interruption or a backchannel."""
