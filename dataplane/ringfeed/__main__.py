from ringfeed.cli import main

main()
